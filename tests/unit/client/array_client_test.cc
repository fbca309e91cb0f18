// CUDA arrays, copies with an array side, texture and surface objects in libtally_client.so
// (client/api/array.cc, texture.cc), against the fake tallyd: descriptors are answered from the
// client's handle, malformed channel descriptors and foreign handles are refused before anything
// is sent, copies to the host land row by row at the destination's pitch (the fake answers 0xAB),
// a deprecated linear copy that runs past a row becomes several array copies, and object
// descriptors come back as given.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

auto* const server = &tally::testing::processFakeTallyd();
using Call = tally::wire::Call;

TEST(ArrayClient, ArraysAnswerTheirDescriptorsThemselves) {
  cudaChannelFormatDesc float4Desc = cudaCreateChannelDesc(32, 32, 32, 32, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  ASSERT_EQ(cudaMalloc3DArray(&array, &float4Desc, cudaExtent{7, 3, 2}, cudaArraySurfaceLoadStore), cudaSuccess);
  uint64_t sent = server->calls();
  cudaChannelFormatDesc desc{};
  cudaExtent extent{};
  unsigned flags = 0;
  ASSERT_EQ(cudaArrayGetInfo(&desc, &extent, &flags, array), cudaSuccess);
  EXPECT_EQ(desc.x, 32);
  EXPECT_EQ(desc.w, 32);
  EXPECT_EQ(desc.f, cudaChannelFormatKindFloat);
  EXPECT_EQ(extent.width, 7u);
  EXPECT_EQ(extent.height, 3u);
  EXPECT_EQ(extent.depth, 2u);
  EXPECT_EQ(flags, static_cast<unsigned>(cudaArraySurfaceLoadStore));
  CUDA_ARRAY3D_DESCRIPTOR d{};
  ASSERT_EQ(cuArray3DGetDescriptor(&d, reinterpret_cast<CUarray>(array)), CUDA_SUCCESS);
  EXPECT_EQ(d.Format, CU_AD_FORMAT_FLOAT);
  EXPECT_EQ(d.NumChannels, 4u);
  EXPECT_EQ(d.Flags, static_cast<unsigned>(CUDA_ARRAY3D_SURFACE_LDST));
  EXPECT_EQ(server->calls(), sent);  // no round trip
  ASSERT_EQ(cudaFreeArray(array), cudaSuccess);
  EXPECT_EQ(cudaGetChannelDesc(&desc, array), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaFreeArray(nullptr), cudaSuccess);
}

TEST(ArrayClient, MalformedChannelDescriptorsAndForeignHandlesSendNothing) {
  uint64_t creates = server->callsOf(Call::ARRAY_CREATE), copies = server->callsOf(Call::ARRAY_COPY);
  cudaArray_t array = nullptr;
  cudaChannelFormatDesc mixed = cudaCreateChannelDesc(8, 16, 0, 0, cudaChannelFormatKindUnsigned);
  cudaChannelFormatDesc three = cudaCreateChannelDesc(32, 32, 32, 0, cudaChannelFormatKindFloat);
  cudaChannelFormatDesc odd = cudaCreateChannelDesc(24, 0, 0, 0, cudaChannelFormatKindSigned);
  EXPECT_EQ(cudaMallocArray(&array, &mixed, 4, 4), cudaErrorInvalidChannelDescriptor);
  EXPECT_EQ(cudaMallocArray(&array, &three, 4, 4), cudaErrorInvalidChannelDescriptor);
  EXPECT_EQ(cudaMallocArray(&array, &odd, 4, 4), cudaErrorInvalidChannelDescriptor);
  EXPECT_EQ(cudaMallocArray(&array, nullptr, 4, 4), cudaErrorInvalidValue);
  EXPECT_EQ(server->callsOf(Call::ARRAY_CREATE), creates);
  // A handle that is not one of ours, and a 3D copy naming both an array and a pointer.
  int notAnArray[16] = {};
  auto* foreign = reinterpret_cast<cudaArray_t>(notAnArray);
  std::vector<float> host(16);
  EXPECT_EQ(cudaMemcpy2DToArray(foreign, 0, 0, host.data(), 16, 16, 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeArray(foreign), cudaErrorInvalidResourceHandle);
  cudaMemcpy3DParms p{};
  p.srcArray = foreign;
  p.srcPtr = cudaPitchedPtr{host.data(), 16, 4, 1};
  p.dstPtr = cudaPitchedPtr{host.data(), 16, 4, 1};
  p.extent = cudaExtent{4, 1, 1};
  p.kind = cudaMemcpyDeviceToHost;
  EXPECT_EQ(cudaMemcpy3D(&p), cudaErrorInvalidValue);
  EXPECT_EQ(server->callsOf(Call::ARRAY_COPY), copies);
  // A wrong direction for an array copy.
  cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  ASSERT_EQ(cudaMallocArray(&array, &f, 4, 4), cudaSuccess);
  EXPECT_EQ(cudaMemcpy2DToArray(array, 0, 0, host.data(), 16, 16, 1, cudaMemcpyDeviceToHost),
            cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy2DToArray(array, 0, 0, host.data(), 8, 16, 2, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
  EXPECT_EQ(server->callsOf(Call::ARRAY_COPY), copies);
  EXPECT_EQ(cudaFreeArray(array), cudaSuccess);
}

TEST(ArrayClient, CopiesToTheHostLandRowByRowAtThePitch) {
  cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  ASSERT_EQ(cudaMallocArray(&array, &f, 8, 8), cudaSuccess);
  std::vector<unsigned char> host(6 * 40, 0);
  ASSERT_EQ(cudaMemcpy2DFromArray(host.data() + 40 + 4, 40, array, 8, 2, 12, 3, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t row = 0; row < 6; ++row) {
    for (size_t col = 0; col < 40; ++col) {
      bool copied = row >= 1 && row < 4 && col >= 4 && col < 16;
      ASSERT_EQ(host[row * 40 + col], copied ? 0xAB : 0) << "row " << row << " column " << col;
    }
  }
  // cuMemcpy2D with an array side is an array copy now, with the array's id.
  uint64_t copies = server->callsOf(Call::ARRAY_COPY);
  std::vector<unsigned char> in(32, 1);
  CUDA_MEMCPY2D p{};
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  p.srcHost = in.data();
  p.srcPitch = 32;
  p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  p.dstArray = reinterpret_cast<CUarray>(array);
  p.WidthInBytes = 32;
  p.Height = 1;
  EXPECT_EQ(cuMemcpy2D(&p), CUDA_SUCCESS);
  EXPECT_EQ(server->callsOf(Call::ARRAY_COPY), copies + 1);
  // 40 bytes from column 24 of a 32-byte row: the rest of row 0, then 32 bytes of row 1 — two copies.
  std::vector<unsigned char> line(40, 0);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // deprecated, still used: tested
  ASSERT_EQ(cudaMemcpyFromArray(line.data(), array, 24, 0, 40, cudaMemcpyDeviceToHost), cudaSuccess);
#pragma GCC diagnostic pop
  EXPECT_EQ(server->callsOf(Call::ARRAY_COPY), copies + 3);
  for (unsigned char c : line) ASSERT_EQ(c, 0xAB);
  EXPECT_EQ(cudaFreeArray(array), cudaSuccess);
}

TEST(ArrayClient, TextureAndSurfaceObjectsKeepTheirDescriptors) {
  cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  ASSERT_EQ(cudaMallocArray(&array, &f, 8, 8, cudaArraySurfaceLoadStore), cudaSuccess);
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = array;
  cudaTextureDesc tex{};
  tex.addressMode[0] = cudaAddressModeWrap;
  tex.addressMode[1] = cudaAddressModeClamp;
  tex.filterMode = cudaFilterModeLinear;
  tex.readMode = cudaReadModeElementType;
  tex.normalizedCoords = 1;
  cudaTextureObject_t texture = 0;
  ASSERT_EQ(cudaCreateTextureObject(&texture, &res, &tex, nullptr), cudaSuccess);
  EXPECT_NE(texture, 0u);
  cudaResourceDesc gotRes{};
  cudaTextureDesc gotTex{};
  ASSERT_EQ(cudaGetTextureObjectResourceDesc(&gotRes, texture), cudaSuccess);
  EXPECT_EQ(gotRes.resType, cudaResourceTypeArray);
  EXPECT_EQ(gotRes.res.array.array, array);
  ASSERT_EQ(cudaGetTextureObjectTextureDesc(&gotTex, texture), cudaSuccess);
  EXPECT_EQ(gotTex.addressMode[0], cudaAddressModeWrap);
  EXPECT_EQ(gotTex.addressMode[1], cudaAddressModeClamp);
  EXPECT_EQ(gotTex.filterMode, cudaFilterModeLinear);
  EXPECT_EQ(gotTex.readMode, cudaReadModeElementType);
  EXPECT_EQ(gotTex.normalizedCoords, 1);
  CUDA_TEXTURE_DESC driverTex{};
  ASSERT_EQ(cuTexObjectGetTextureDesc(&driverTex, texture), CUDA_SUCCESS);
  EXPECT_EQ(driverTex.flags, static_cast<unsigned>(CU_TRSF_NORMALIZED_COORDINATES));  // float: no integer read
  cudaResourceViewDesc view{};
  EXPECT_EQ(cudaGetTextureObjectResourceViewDesc(&view, texture), cudaErrorInvalidValue);  // made without one
  cudaSurfaceObject_t surface = 0;
  ASSERT_EQ(cudaCreateSurfaceObject(&surface, &res), cudaSuccess);
  ASSERT_EQ(cudaGetSurfaceObjectResourceDesc(&gotRes, surface), cudaSuccess);
  EXPECT_EQ(gotRes.res.array.array, array);
  EXPECT_EQ(cudaDestroyTextureObject(texture), cudaSuccess);
  EXPECT_EQ(cudaGetTextureObjectResourceDesc(&gotRes, texture), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDestroySurfaceObject(surface), cudaSuccess);
  // A mipmapped resource must be one of ours; a linear resource's channel descriptor must be valid.
  uint64_t creates = server->callsOf(Call::TEXTURE_CREATE);
  res.resType = cudaResourceTypeMipmappedArray;  // the union's handle is the (plain) array's
  EXPECT_EQ(cudaCreateTextureObject(&texture, &res, &tex, nullptr), cudaErrorInvalidValue);
  res.resType = cudaResourceTypeLinear;
  res.res.linear.devPtr = reinterpret_cast<void*>(0x1000);
  res.res.linear.desc = cudaCreateChannelDesc(32, 32, 32, 0, cudaChannelFormatKindFloat);
  res.res.linear.sizeInBytes = 64;
  EXPECT_EQ(cudaCreateTextureObject(&texture, &res, &tex, nullptr), cudaErrorInvalidChannelDescriptor);
  EXPECT_EQ(server->callsOf(Call::TEXTURE_CREATE), creates);
  EXPECT_EQ(cudaFreeArray(array), cudaSuccess);
}

TEST(ArrayClient, MipmappedLevelsAreArraysOfTheirMipmappedArray) {
  cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaMipmappedArray_t mipmapped = nullptr;
  ASSERT_EQ(cudaMallocMipmappedArray(&mipmapped, &f, cudaExtent{16, 16, 0}, 3, 0), cudaSuccess);
  uint64_t asks = server->callsOf(Call::MIPMAPPED_ARRAY_GET_LEVEL);
  cudaArray_t level = nullptr, again = nullptr;
  // The fake tallyd answers no descriptor: the level is refused, and asked again next time.
  EXPECT_EQ(cudaGetMipmappedArrayLevel(&level, mipmapped, 1), cudaErrorUnknown);
  EXPECT_EQ(cudaGetMipmappedArrayLevel(&again, mipmapped, 1), cudaErrorUnknown);
  EXPECT_EQ(server->callsOf(Call::MIPMAPPED_ARRAY_GET_LEVEL), asks + 2);
  EXPECT_EQ(cudaGetMipmappedArrayLevel(&level, mipmapped, 3), cudaErrorInvalidValue);  // levels 0..2
  EXPECT_EQ(server->callsOf(Call::MIPMAPPED_ARRAY_GET_LEVEL), asks + 2);
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeMipmappedArray;
  res.res.mipmap.mipmap = mipmapped;
  cudaTextureDesc tex{};
  tex.mipmapFilterMode = cudaFilterModePoint;
  tex.maxMipmapLevelClamp = 2;
  cudaTextureObject_t texture = 0;
  ASSERT_EQ(cudaCreateTextureObject(&texture, &res, &tex, nullptr), cudaSuccess);
  cudaResourceDesc got{};
  ASSERT_EQ(cudaGetTextureObjectResourceDesc(&got, texture), cudaSuccess);
  EXPECT_EQ(got.resType, cudaResourceTypeMipmappedArray);
  EXPECT_EQ(got.res.mipmap.mipmap, mipmapped);
  EXPECT_EQ(cudaDestroyTextureObject(texture), cudaSuccess);
  EXPECT_EQ(cudaFreeMipmappedArray(mipmapped), cudaSuccess);
  EXPECT_EQ(cudaGetMipmappedArrayLevel(&level, mipmapped, 0), cudaErrorInvalidResourceHandle);
}

}  // namespace
