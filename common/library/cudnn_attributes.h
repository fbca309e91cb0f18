// Element sizes of cuDNN backend attribute types (cudnnBackendAttributeType_t), which decide how
// many bytes a cudnnBackendSetAttribute/GetAttribute array holds. Kept as numbers so that
// common/ needs no cuDNN header; the values are cuDNN 9's (cudnn_graph.h).
#pragma once

#include <cstdint>

namespace tally::library {

enum CudnnAttributeType : int32_t {
  kCudnnTypeHandle = 0,             // cudnnHandle_t: travels as the client's handle id
  kCudnnTypeVoidPtr = 6,            // addresses: device memory, or host bytes of a by-value tensor
  kCudnnTypeBackendDescriptor = 15,  // travels as the client's descriptor id
  kCudnnTypeFraction = 26,          // cudnnFraction_t {int64 numerator, int64 denominator}
};

// Bytes of one element as the application passes it; -1 for a type this build does not know.
constexpr int cudnnElementSize(int32_t type) {
  switch (type) {
    case 0: case 6: case 15: return 8;  // handle, void*, descriptor
    case 2: return 1;                   // bool
    case 3: case 5: return 8;           // int64, double
    case 24: return 1;                  // char
    case 26: return 16;                 // cudnnFraction_t
    case 1: case 4: case 7: case 8: case 9: case 10: case 11: case 12: case 13: case 14: case 16: case 17: case 18:
    case 19: case 20: case 21: case 22: case 23: case 25: case 27: case 28: case 29: case 30:
      return 4;                         // float, int32 and the enums
    default:
      return -1;
  }
}

// Attribute names the client and tallyd both look at.
inline constexpr uint32_t kCudnnAttrTensorUniqueId = 906;
inline constexpr uint32_t kCudnnAttrTensorIsByValue = 908;
inline constexpr uint32_t kCudnnAttrVariantPackUniqueIds = 1000;
inline constexpr uint32_t kCudnnAttrVariantPackDataPointers = 1001;
inline constexpr int32_t kCudnnBackendVariantPack = 16;
inline constexpr int32_t kCudnnBackendTensor = 17;
inline constexpr int64_t kMaxCudnnElements = 1 << 16;

}  // namespace tally::library
