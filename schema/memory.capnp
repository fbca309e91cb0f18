@0xebfa45ea10f96d1d;
# Memory family: allocations and copies. Device addresses are real server addresses (kernels
# dereference them); every one is checked against the tenant's allocation table.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

struct MemAlloc {
  device @0 :UInt32;
  size @1 :UInt64;
  pitchWidth @2 :UInt64;          # non-zero: pitched allocation of pitchHeight rows
  pitchHeight @3 :UInt64;
}

struct MemFree {
  ptr @0 :UInt64;
}

enum CopyKind {
  hostToDevice @0;                # bytes follow as bulk, or come from shared host memory
  deviceToHost @1;                # bytes return as HostData bulk, or land in shared host memory
  deviceToDevice @2;
}

struct Memcpy {
  kind @0 :CopyKind;
  stream @1 :UInt64;
  dst @2 :UInt64;                 # device address, or client address of shared host memory
  src @3 :UInt64;
  # 2D copies: `height` rows of `width` bytes; pitches are those of the device side (the host
  # side of a bulk copy is packed: rows back to back).
  width @4 :UInt64;
  height @5 :UInt64;
  dstPitch @6 :UInt64;
  srcPitch @7 :UInt64;
  hostShared @8 :Bool;            # host side lives in client memory shared with the server
  token @9 :UInt64;               # device-to-host bulk: where HostData goes; host-to-device via
                                  # lanes: the token of the LaneData that carries the bytes
  viaLanes @10 :Bool;             # the bytes travel on the tenant's bulk lanes, not after this
                                  # message (host-to-device), or may (device-to-host, synchronous)
}

struct Memset {
  stream @0 :UInt64;
  dst @1 :UInt64;
  value @2 :UInt32;
  width @3 :UInt64;               # in elements
  height @4 :UInt64;
  pitch @5 :UInt64;               # in bytes
  elementSize @6 :UInt8;          # 1, 2 or 4 (cuMemsetD8/D16/D32)
}

struct MemGetInfo {
  device @0 :UInt32;
}

struct MemInfo {
  free @0 :UInt64;
  total @1 :UInt64;
}

struct HostRegister {
  clientAddress @0 :UInt64;
  size @1 :UInt64;
}

struct HostUnregister {
  clientAddress @0 :UInt64;
}
