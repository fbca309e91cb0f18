@0xed0e3b7ea998e887;
# Kernel launches. Parameters travel as one buffer laid out by the kernel's own parameter
# offsets (cuFuncGetParamInfo on the server), so structs of any size up to 32 KiB pass as-is.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

struct Dim3 {
  x @0 :UInt32;
  y @1 :UInt32;
  z @2 :UInt32;
}

struct LaunchAttribute {
  id @0 :UInt32;                  # CUlaunchAttributeID
  value @1 :Dim3;                 # scalar attributes use x
}

struct LaunchKernel {
  function @0 :UInt64;
  grid @1 :Dim3;
  block @2 :Dim3;
  sharedMem @3 :UInt32;
  stream @4 :UInt64;
  params @5 :Data;
  cooperative @6 :Bool;
  attributes @7 :List(LaunchAttribute);
}
