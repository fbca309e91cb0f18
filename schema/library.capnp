@0xb7d3c2a1f0e4d5c6;
# Forwarded calls of the GPU libraries (cuBLAS, cuBLASLt, cuDNN). There are hundreds of them,
# so the wire does not name each: a call is its function's id and its arguments packed by
# common/library/arg_buffer.h in the layout schema/codegen/gen_library_stubs.py derives from the
# library headers (or the hand-written layout of the few functions the client keeps state for:
# docs/architecture.md, "Library calls").

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

struct LibraryCall {
  function @0 :UInt32;   # library::functionId(name): FNV-1a of the C name
  device @1 :UInt32;     # the calling thread's current device
  args @2 :Data;
}
