@0x88573b6b920232b8;
# Modules and functions. Images are identified by content hash so their bytes cross the wire
# once per server; each tenant still gets its own module instance (its own __device__ globals).
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");
using Launch = import "launch.capnp";

enum ImageKind {
  cubin @0;
  ptx @1;
  fatbin @2;
}

struct ModuleLoad {
  device @0 :UInt32;
  module @1 :UInt64;              # client-chosen handle
  hash @2 :Data;                  # SHA-256 of the image bytes, then the PTX bytes
  kind @3 :ImageKind;
  imageSize @4 :UInt64;
  hasImage @5 :Bool;              # the image bytes follow as bulk (then the PTX bytes)
  ptxSize @6 :UInt64;             # the PTX a cubin image was compiled from (same virtual arch), for
                                  # tallyd's kernel transforms; 0: none (or the image is PTX itself)
}

struct ModuleLoadResult {
  needImage @0 :Bool;             # server does not know this hash: resend with the image
}

struct TensorMapEncodeTiled {
  # cuTensorMapEncodeTiled (TMA descriptors, Triton on Hopper): encoded by tallyd's driver, the
  # 128 bytes come back in Reply.tensorMap. Lists have `rank` entries (strides rank - 1).
  device @0 :UInt32;
  dataType @1 :UInt32;
  rank @2 :UInt32;
  globalAddress @3 :UInt64;
  globalDim @4 :List(UInt64);
  globalStrides @5 :List(UInt64);
  boxDim @6 :List(UInt32);
  elementStrides @7 :List(UInt32);
  interleave @8 :UInt32;
  swizzle @9 :UInt32;
  l2Promotion @10 :UInt32;
  oobFill @11 :UInt32;
}

struct ModuleRef {
  module @0 :UInt64;
}

struct ModuleGetFunction {
  module @0 :UInt64;
  function @1 :UInt64;            # client-chosen handle
  name @2 :Text;
}

struct ParamInfo {
  offset @0 :UInt32;
  size @1 :UInt32;
}

struct FunctionInfo {
  params @0 :List(ParamInfo);
  attributes @1 :List(Int32);     # index = CUfunction_attribute
}

struct ModuleGetGlobal {
  module @0 :UInt64;
  name @1 :Text;
}

struct GlobalInfo {
  ptr @0 :UInt64;
  size @1 :UInt64;
}

struct FuncSetAttribute {
  function @0 :UInt64;
  attribute @1 :Int32;            # CUfunction_attribute
  value @2 :Int32;
}

struct Occupancy {
  function @0 :UInt64;
  blockSize @1 :Int32;
  dynamicSmem @2 :UInt64;
  flags @3 :UInt32;
  availableDynamicSmem @4 :Bool;  # cuOccupancyAvailableDynamicSMemPerBlock(numBlocks, blockSize)
  numBlocks @5 :Int32;
  clusters @6 :ClusterOccupancy;  # set: a question about thread-block clusters (dynamicSmem applies)
}

# cuOccupancyMaxActiveClusters / cuOccupancyMaxPotentialClusterSize for one launch configuration.
struct ClusterOccupancy {
  grid @0 :Launch.Dim3;
  block @1 :Launch.Dim3;
  clusterDim @2 :Launch.Dim3;     # 0,0,0: none given (the kernel's compile-time cluster, if any)
  potentialSize @3 :Bool;         # the largest cluster size instead of the number of clusters
}

# Driver JIT linking (cuLink*): the link state lives in tallyd, where the driver's linker runs,
# under a client-chosen id. Log buffers are client memory: tallyd fills buffers of the sizes
# asked for and sends their text back (LinkResult), with the wall time and, at completion, the
# linked image.
struct JitOption {
  option @0 :UInt32;              # CUjit_option, a value option only (no pointers, no outputs)
  value @1 :UInt64;
}

struct LinkCreate {
  device @0 :UInt32;
  link @1 :UInt64;                # client-chosen id
  options @2 :List(JitOption);
  infoLogBytes @3 :UInt32;        # 0: no info log buffer
  errorLogBytes @4 :UInt32;       # 0: no error log buffer
  wallTime @5 :Bool;              # CU_JIT_WALL_TIME was asked for
}

struct LinkAddData {
  link @0 :UInt64;
  inputType @1 :UInt32;           # CUjitInputType
  name @2 :Text;
  size @3 :UInt64;                # the input's bytes follow as bulk
  options @4 :List(JitOption);
}

struct LinkRef {
  link @0 :UInt64;
}

struct LinkResult {
  infoLog @0 :Text;
  errorLog @1 :Text;
  wallTimeMs @2 :Float32;
  image @3 :Data;                 # linkComplete only: the linked cubin
}
