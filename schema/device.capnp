@0x83f34cb12deb47d0;
# Device family: what the handshake tells the client about each GPU, and device-wide calls.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

struct DeviceInfo {
  ordinal @0 :UInt32;
  name @1 :Text;
  major @2 :Int32;
  minor @3 :Int32;
  totalMem @4 :UInt64;
  properties @5 :Data;            # raw cudaDeviceProp of the server's CUDA 13 runtime
  attributes @6 :List(Int32);     # index = CUdevice_attribute (== cudaDeviceAttr)
  streamPriorityLeast @7 :Int32;
  streamPriorityGreatest @8 :Int32;
  uuid @9 :Data;
  # P2P attributes from this device towards each device of the Welcome's list (outer index: the
  # peer's position there; inner index: CUdevice_P2PAttribute). All 0 towards itself.
  p2pAttributes @10 :List(List(Int32));
}

struct DeviceRef {
  device @0 :UInt32;
}

struct Limit {
  device @0 :UInt32;
  limit @1 :UInt32;               # CUlimit
  value @2 :UInt64;
}
