@0xe9dd5e6daef02af3;
# CUDA arrays, texture objects and surface objects (server/api/array_api.cc). Arrays live in
# tallyd under ids the client chose (the application's cudaArray_t / CUarray is the client's
# handle object); texture and surface objects are the driver's 64-bit values, which kernels take
# as parameters, so the client hands them to the application as they come. Every id, object and
# device address is checked to be the tenant's own (server/session/array_table.h).
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::wire");

# CUDA_ARRAY3D_DESCRIPTOR. height 0: a 1D array; depth 0: 1D or 2D (or the layer/face count with
# the layered and cubemap flags).
struct ArrayDescriptor {
  width @0 :UInt64;
  height @1 :UInt64;
  depth @2 :UInt64;
  format @3 :UInt32;              # CUarray_format
  numChannels @4 :UInt32;
  flags @5 :UInt32;               # CUDA_ARRAY3D_* (layered, surface load/store, cubemap, gather)
}

struct ArrayCreate {
  device @0 :UInt32;
  array @1 :UInt64;               # client-chosen id
  descriptor @2 :ArrayDescriptor;
}

struct ArrayRef {
  array @0 :UInt64;
}

# A mipmapped array (cuMipmappedArrayCreate) under a client-chosen id; its levels are arrays the
# client names with ids of its own (MipmappedArrayGetLevel), which go with the mipmapped array.
struct MipmappedArrayCreate {
  device @0 :UInt32;
  mipmappedArray @1 :UInt64;      # client-chosen id
  descriptor @2 :ArrayDescriptor; # of level 0
  numLevels @3 :UInt32;
}

struct MipmappedArrayGetLevel {
  mipmappedArray @0 :UInt64;
  level @1 :UInt32;
  array @2 :UInt64;               # client-chosen id for the level's array; Reply.arrayDescriptor
}

# One side of a copy to, from or between arrays (CUDA_MEMCPY3D's side).
struct CopySide {
  union {
    host @0 :Void;                # bytes in the frame's bulk (source, packed rows) or sent back as
                                  # HostData under ArrayCopy.token (destination, packed rows)
    hostShared @1 :UInt64;        # client address in host memory shared with tallyd
    device @2 :UInt64;            # device address (the tenant's memory)
    array @3 :UInt64;             # the tenant's array id
  }
  xInBytes @4 :UInt64;            # offsets into the side (not for `host`: it is packed)
  y @5 :UInt64;
  z @6 :UInt64;
  pitch @7 :UInt64;               # linear sides: bytes per row
  height @8 :UInt64;              # linear sides: rows per slice
}

struct ArrayCopy {
  stream @0 :UInt64;
  src @1 :CopySide;
  dst @2 :CopySide;
  widthInBytes @3 :UInt64;
  height @4 :UInt64;
  depth @5 :UInt64;
  token @6 :UInt64;               # dst `host`: where HostData goes
}

# CUDA_RESOURCE_DESC.
struct ResourceDesc {
  union {
    array @0 :UInt64;             # the tenant's array id
    linear @1 :LinearResource;
    pitch2D @2 :Pitch2DResource;
    mipmappedArray @4 :UInt64;    # the tenant's mipmapped array id
  }
  flags @3 :UInt32;
}

struct LinearResource {
  devPtr @0 :UInt64;
  format @1 :UInt32;
  numChannels @2 :UInt32;
  sizeInBytes @3 :UInt64;
}

struct Pitch2DResource {
  devPtr @0 :UInt64;
  format @1 :UInt32;
  numChannels @2 :UInt32;
  width @3 :UInt64;               # in elements
  height @4 :UInt64;
  pitchInBytes @5 :UInt64;
}

# CUDA_TEXTURE_DESC.
struct TextureDesc {
  addressMode @0 :List(UInt32);   # 3 CUaddress_mode values
  filterMode @1 :UInt32;
  flags @2 :UInt32;               # CU_TRSF_*
  maxAnisotropy @3 :UInt32;
  mipmapFilterMode @4 :UInt32;
  mipmapLevelBias @5 :Float32;
  minMipmapLevelClamp @6 :Float32;
  maxMipmapLevelClamp @7 :Float32;
  borderColor @8 :List(Float32);  # 4 values
}

# CUDA_RESOURCE_VIEW_DESC.
struct ResourceViewDesc {
  format @0 :UInt32;
  width @1 :UInt64;
  height @2 :UInt64;
  depth @3 :UInt64;
  firstMipmapLevel @4 :UInt32;
  lastMipmapLevel @5 :UInt32;
  firstLayer @6 :UInt32;
  lastLayer @7 :UInt32;
}

struct TextureCreate {
  device @0 :UInt32;              # for linear and pitch2D resources (an array knows its GPU)
  resource @1 :ResourceDesc;
  texture @2 :TextureDesc;
  hasView @3 :Bool;
  view @4 :ResourceViewDesc;
}

struct SurfaceCreate {
  resource @0 :ResourceDesc;      # an array with the surface load/store flag
}

struct ObjectRef {
  object @0 :UInt64;              # a texture or surface object's value
}
