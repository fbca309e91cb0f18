// CUDA arrays, texture and surface objects through tallyd's real handlers (server/api/array_api.cc)
// on the fake GPU, whose arrays are exact-size host buffers (fake_gpu/fake_arrays.cc): bytes go
// in and out of arrays, a tenant can name only its own arrays, objects and memory, malformed
// descriptors get the driver's error, arrays count against the memory quota, an array under a
// live texture object outlives its destroy call, and a tenant's end destroys everything it had.
#include "tests/fuzz/graph_session_harness.h"

#include <cuda.h>

#include <cstring>
#include <string>
#include <vector>

namespace tally {
namespace {

size_t fakeCount(const char* name) {
  openGpus();  // loads the driver
  void* fake = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void* symbol = fake != nullptr ? ::dlsym(fake, name) : nullptr;
  if (symbol == nullptr) throw std::runtime_error(std::string("the fake driver has no ") + name);
  return reinterpret_cast<size_t (*)()>(symbol)();
}
size_t liveArrays() { return fakeCount("tallyFakeLiveArrays"); }
size_t liveObjects() { return fakeCount("tallyFakeLiveObjects"); }
size_t liveMipmapped() { return fakeCount("tallyFakeLiveMipmappedArrays"); }

Answer createMipmapped(Tenant& t, uint64_t id, uint64_t width, uint64_t height, uint32_t levels) {
  return t.call([&](wire::Call::Builder c) {
    auto m = c.initMipmappedArrayCreate();
    m.setMipmappedArray(id);
    m.setNumLevels(levels);
    auto d = m.initDescriptor();
    d.setWidth(width);
    d.setHeight(height);
    d.setFormat(CU_AD_FORMAT_FLOAT);
    d.setNumChannels(1);
  });
}

// The level's array under `array`; `width` receives its width from the reply.
Answer getLevel(Tenant& t, uint64_t mipmapped, uint32_t level, uint64_t array) {
  return t.call([&](wire::Call::Builder c) {
    auto g = c.initMipmappedArrayGetLevel();
    g.setMipmappedArray(mipmapped);
    g.setLevel(level);
    g.setArray(array);
  });
}

Answer createArray(Tenant& t, uint64_t id, uint64_t width, uint64_t height, uint64_t depth = 0,
                   uint32_t format = CU_AD_FORMAT_FLOAT, uint32_t channels = 1, uint32_t flags = 0) {
  return t.call([&](wire::Call::Builder c) {
    auto m = c.initArrayCreate();
    m.setArray(id);
    auto d = m.initDescriptor();
    d.setWidth(width);
    d.setHeight(height);
    d.setDepth(depth);
    d.setFormat(format);
    d.setNumChannels(channels);
    d.setFlags(flags);
  });
}

Answer destroyArray(Tenant& t, uint64_t id) {
  return t.call([&](wire::Call::Builder c) { c.initArrayDestroy().setArray(id); });
}

struct Region {
  uint64_t x = 0, y = 0, z = 0;
};

void setArraySide(wire::CopySide::Builder side, uint64_t id, Region at) {
  side.setArray(id);
  side.setXInBytes(at.x);
  side.setY(at.y);
  side.setZ(at.z);
}

// Host bytes (packed rows) into array `id` at `at`.
Answer toArray(Tenant& t, uint64_t id, Region at, uint64_t width, uint64_t height, uint64_t depth,
               const std::string& bytes) {
  return t.call([&](wire::Call::Builder c) {
    auto m = c.initArrayCopy();
    m.setStream(kLegacy);
    m.initSrc().setHost();
    setArraySide(m.initDst(), id, at);
    m.setWidthInBytes(width);
    m.setHeight(height);
    m.setDepth(depth);
  }, bytes);
}

// The bytes of a region of array `id`, packed; empty when the copy failed.
std::string fromArray(Tenant& t, uint64_t id, Region at, uint64_t width, uint64_t height, uint64_t depth,
                      CUresult* status = nullptr) {
  Answer a = t.call([&](wire::Call::Builder c) {
    auto m = c.initArrayCopy();
    m.setStream(kLegacy);
    setArraySide(m.initSrc(), id, at);
    m.initDst().setHost();
    m.setWidthInBytes(width);
    m.setHeight(height);
    m.setDepth(depth);
    m.setToken(91);
  });
  if (status != nullptr) *status = a.status;
  if (a.status != CUDA_SUCCESS) return {};
  return {t.lastData().begin(), t.lastData().end()};
}

std::string sequence(size_t n, char first = 1) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(first + i);
  return s;
}

Answer createTexture(Tenant& t, uint64_t array) {
  return t.call([&](wire::Call::Builder c) {
    auto m = c.initTextureCreate();
    m.initResource().setArray(array);
    auto tex = m.initTexture();
    auto modes = tex.initAddressMode(3);
    modes.set(0, CU_TR_ADDRESS_MODE_CLAMP);
    tex.setFilterMode(CU_TR_FILTER_MODE_LINEAR);
    tex.setFlags(CU_TRSF_NORMALIZED_COORDINATES);
  });
}

Answer createLinearTexture(Tenant& t, uint64_t devPtr, uint64_t bytes) {
  return t.call([&](wire::Call::Builder c) {
    auto m = c.initTextureCreate();
    auto l = m.initResource().initLinear();
    l.setDevPtr(devPtr);
    l.setFormat(CU_AD_FORMAT_FLOAT);
    l.setNumChannels(1);
    l.setSizeInBytes(bytes);
    m.initTexture();
  });
}

Answer createSurface(Tenant& t, uint64_t array) {
  return t.call([&](wire::Call::Builder c) { c.initSurfaceCreate().initResource().setArray(array); });
}

Answer destroyObject(Tenant& t, uint64_t value, bool surface) {
  return t.call([&](wire::Call::Builder c) {
    if (surface) {
      c.initSurfaceDestroy().setObject(value);
    } else {
      c.initTextureDestroy().setObject(value);
    }
  });
}

TEST(ArraySession, BytesGoInAndOutOf1D2DAnd3DArrays) {
  Tenant t(server());
  // 2D: 8 floats x 4 rows (32 bytes a row).
  ASSERT_EQ(createArray(t, 100, 8, 4).status, CUDA_SUCCESS);
  std::string image = sequence(128);
  ASSERT_EQ(toArray(t, 100, {}, 32, 4, 1, image).status, CUDA_SUCCESS);
  EXPECT_EQ(fromArray(t, 100, {}, 32, 4, 1), image);
  // A 2x2-float window at column 1 (4 bytes), row 2.
  ASSERT_EQ(toArray(t, 100, {4, 2, 0}, 8, 2, 1, std::string(16, '\x7f')).status, CUDA_SUCCESS);
  std::string expected = image;
  for (int row = 2; row < 4; ++row) std::memset(&expected[row * 32 + 4], 0x7f, 8);
  EXPECT_EQ(fromArray(t, 100, {}, 32, 4, 1), expected);
  EXPECT_EQ(fromArray(t, 100, {4, 3, 0}, 8, 1, 1), std::string(8, '\x7f'));

  // 1D: 16 bytes of uchar.
  ASSERT_EQ(createArray(t, 101, 16, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8).status, CUDA_SUCCESS);
  ASSERT_EQ(toArray(t, 101, {}, 16, 1, 1, sequence(16, 'a')).status, CUDA_SUCCESS);
  EXPECT_EQ(fromArray(t, 101, {3, 0, 0}, 5, 1, 1), "defgh");

  // 3D: 2 x 3 x 4 of int2 (16 bytes a row); slice 2 alone.
  ASSERT_EQ(createArray(t, 102, 2, 3, 4, CU_AD_FORMAT_SIGNED_INT32, 2).status, CUDA_SUCCESS);
  std::string volume = sequence(16 * 3 * 4);
  ASSERT_EQ(toArray(t, 102, {}, 16, 3, 4, volume).status, CUDA_SUCCESS);
  EXPECT_EQ(fromArray(t, 102, {0, 0, 2}, 16, 3, 1), volume.substr(2 * 48, 48));
  EXPECT_EQ(fromArray(t, 102, {}, 16, 3, 4), volume);

  // Array to device memory and back into another array.
  Answer memory = t.call([](wire::Call::Builder c) { c.initMemAlloc().setSize(128); });
  ASSERT_EQ(memory.status, CUDA_SUCCESS);
  Answer toDevice = t.call([&](wire::Call::Builder c) {
    auto m = c.initArrayCopy();
    m.setStream(kLegacy);
    setArraySide(m.initSrc(), 100, {});
    auto d = m.initDst();
    d.setDevice(memory.value);
    d.setPitch(32);
    m.setWidthInBytes(32);
    m.setHeight(4);
  });
  ASSERT_EQ(toDevice.status, CUDA_SUCCESS);
  uint32_t word = 0;
  std::memcpy(&word, expected.data() + 36, 4);
  EXPECT_EQ(t.read(memory.value + 36), word);
  ASSERT_EQ(createArray(t, 103, 8, 4).status, CUDA_SUCCESS);
  Answer back = t.call([&](wire::Call::Builder c) {
    auto m = c.initArrayCopy();
    m.setStream(kLegacy);
    auto s = m.initSrc();
    s.setDevice(memory.value);
    s.setPitch(32);
    setArraySide(m.initDst(), 103, {});
    m.setWidthInBytes(32);
    m.setHeight(4);
  });
  ASSERT_EQ(back.status, CUDA_SUCCESS);
  EXPECT_EQ(fromArray(t, 103, {}, 32, 4, 1), expected);
  // Array to array.
  ASSERT_EQ(createArray(t, 104, 8, 4).status, CUDA_SUCCESS);
  Answer between = t.call([&](wire::Call::Builder c) {
    auto m = c.initArrayCopy();
    m.setStream(kLegacy);
    setArraySide(m.initSrc(), 100, {0, 1, 0});
    setArraySide(m.initDst(), 104, {0, 0, 0});
    m.setWidthInBytes(32);
    m.setHeight(3);
  });
  ASSERT_EQ(between.status, CUDA_SUCCESS);
  EXPECT_EQ(fromArray(t, 104, {}, 32, 3, 1), expected.substr(32, 96));
}

TEST(ArraySession, ATenantNamesOnlyItsOwnArraysObjectsAndMemory) {
  Tenant a(server()), b(server());
  ASSERT_EQ(createArray(a, 200, 8, 8, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST).status, CUDA_SUCCESS);
  ASSERT_EQ(toArray(a, 200, {}, 32, 8, 1, sequence(256)).status, CUDA_SUCCESS);
  // b knows nothing of a's array id: no copy in or out, no destroy, no object over it.
  EXPECT_EQ(toArray(b, 200, {}, 32, 1, 1, std::string(32, '\0')).status, CUDA_ERROR_INVALID_HANDLE);
  CUresult status = CUDA_SUCCESS;
  EXPECT_EQ(fromArray(b, 200, {}, 32, 1, 1, &status), "");
  EXPECT_EQ(status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(destroyArray(b, 200).status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(createTexture(b, 200).status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(createSurface(b, 200).status, CUDA_ERROR_INVALID_HANDLE);
  // b's own array with the same id is b's, and a's bytes stayed a's.
  ASSERT_EQ(createArray(b, 200, 8, 8).status, CUDA_SUCCESS);
  EXPECT_EQ(fromArray(a, 200, {}, 32, 8, 1), sequence(256));

  // a's objects: b can neither destroy them nor make objects over a's memory.
  Answer texture = createTexture(a, 200);
  ASSERT_EQ(texture.status, CUDA_SUCCESS);
  Answer surface = createSurface(a, 200);
  ASSERT_EQ(surface.status, CUDA_SUCCESS);
  EXPECT_EQ(destroyObject(b, texture.value, false).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(destroyObject(b, surface.value, true).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(destroyObject(a, texture.value, true).status, CUDA_ERROR_INVALID_VALUE);  // not a surface
  Answer memory = a.call([](wire::Call::Builder c) { c.initMemAlloc().setSize(256); });
  ASSERT_EQ(memory.status, CUDA_SUCCESS);
  EXPECT_EQ(createLinearTexture(b, memory.value, 256).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(createLinearTexture(a, memory.value, 257).status, CUDA_ERROR_INVALID_VALUE);  // past the allocation
  Answer linear = createLinearTexture(a, memory.value, 256);
  EXPECT_EQ(linear.status, CUDA_SUCCESS);
  // b's array cannot be filled from a's memory, nor copied into it.
  Answer steal = b.call([&](wire::Call::Builder c) {
    auto m = c.initArrayCopy();
    m.setStream(kLegacy);
    auto s = m.initSrc();
    s.setDevice(memory.value);
    s.setPitch(32);
    setArraySide(m.initDst(), 200, {});
    m.setWidthInBytes(32);
    m.setHeight(8);
  });
  EXPECT_EQ(steal.status, CUDA_ERROR_INVALID_VALUE);
  Answer overwrite = b.call([&](wire::Call::Builder c) {
    auto m = c.initArrayCopy();
    m.setStream(kLegacy);
    setArraySide(m.initSrc(), 200, {});
    auto d = m.initDst();
    d.setDevice(memory.value);
    d.setPitch(32);
    m.setWidthInBytes(32);
    m.setHeight(8);
  });
  EXPECT_EQ(overwrite.status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(destroyObject(a, texture.value, false).status, CUDA_SUCCESS);
  EXPECT_EQ(destroyObject(a, surface.value, true).status, CUDA_SUCCESS);
  EXPECT_EQ(destroyObject(a, linear.value, false).status, CUDA_SUCCESS);
  EXPECT_EQ(destroyArray(a, 200).status, CUDA_SUCCESS);
  EXPECT_EQ(destroyArray(a, 200).status, CUDA_ERROR_INVALID_HANDLE);
}

TEST(ArraySession, MalformedDescriptorsAndRegionsGetTheDriversError) {
  Tenant t(server());
  EXPECT_EQ(createArray(t, 300, 0, 4).status, CUDA_ERROR_INVALID_VALUE);                              // zero width
  EXPECT_EQ(createArray(t, 301, 4, 4, 0, CU_AD_FORMAT_FLOAT, 3).status, CUDA_ERROR_INVALID_VALUE);   // 3 channels
  EXPECT_EQ(createArray(t, 302, 4, 4, 0, 0x77).status, CUDA_ERROR_INVALID_VALUE);                    // no such format
  EXPECT_EQ(createArray(t, 303, 4, 4, 0, CU_AD_FORMAT_BC1_UNORM, 4).status, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(createArray(t, 304, uint64_t(1) << 40, uint64_t(1) << 40, uint64_t(1) << 40).status,
            CUDA_ERROR_INVALID_VALUE);  // the size wraps
  EXPECT_EQ(createArray(t, 305, 1u << 20, 1).status, CUDA_ERROR_INVALID_VALUE);  // past the device's limit
  EXPECT_EQ(createArray(t, 306, 4, 0, 4).status, CUDA_ERROR_INVALID_VALUE);      // 3D without height
  EXPECT_EQ(createArray(t, 307, 4, 8, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(createArray(t, 308, 4, 4, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SPARSE).status, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(createArray(t, 309, 4, 4, 0, CU_AD_FORMAT_FLOAT, 1, 0x10000).status, CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(createArray(t, 310, 4, 4).status, CUDA_SUCCESS);
  EXPECT_EQ(createArray(t, 310, 4, 4).status, CUDA_ERROR_INVALID_VALUE);  // id in use
  ASSERT_EQ(createArray(t, 311, 4, 4, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP).status, CUDA_SUCCESS);
  ASSERT_EQ(createArray(t, 312, 4, 0, 3, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED).status, CUDA_SUCCESS);
  // Regions outside the array: past the row, the rows, the slices; the bulk is still consumed.
  EXPECT_EQ(toArray(t, 310, {4, 0, 0}, 16, 1, 1, std::string(16, '\0')).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(toArray(t, 310, {0, 3, 0}, 16, 2, 1, std::string(32, '\0')).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(toArray(t, 311, {0, 0, 5}, 16, 4, 2, std::string(128, '\0')).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(toArray(t, 311, {0, 0, 5}, 16, 4, 1, std::string(64, '\x01')).status, CUDA_SUCCESS);  // face 5
  EXPECT_EQ(fromArray(t, 311, {0, 0, 5}, 16, 4, 1), std::string(64, '\x01'));
  EXPECT_EQ(toArray(t, 312, {0, 0, 2}, 16, 1, 1, std::string(16, '\x02')).status, CUDA_SUCCESS);  // layer 2
  // A surface needs the load/store flag; unknown texture enums never reach the driver.
  EXPECT_EQ(createSurface(t, 310).status, CUDA_ERROR_INVALID_VALUE);
  Answer badMode = t.call([](wire::Call::Builder c) {
    auto m = c.initTextureCreate();
    m.initResource().setArray(310);
    m.initTexture().initAddressMode(3).set(1, 9);
  });
  EXPECT_EQ(badMode.status, CUDA_ERROR_INVALID_VALUE);
  // The session is still fine.
  EXPECT_EQ(fromArray(t, 312, {0, 0, 2}, 16, 1, 1), std::string(16, '\x02'));
}

Server& quotaServer() {
  static auto* s = [] {
    auto* created = new Server("passthrough");
    session::TenantRule rule;
    rule.name = "array-quota";
    rule.unixUid = ::getuid();
    rule.limits.memoryQuotaBytes = 4096;
    created->services.auth.tenants.push_back(rule);
    return created;
  }();
  return *s;
}

TEST(ArraySession, ArraysCountAgainstTheMemoryQuota) {
  Tenant t(quotaServer());
  ASSERT_EQ(createArray(t, 400, 16, 16).status, CUDA_SUCCESS);  // 1 KiB
  EXPECT_EQ(createArray(t, 401, 32, 32).status, CUDA_ERROR_OUT_OF_MEMORY);  // 4 KiB more
  ASSERT_EQ(createArray(t, 402, 16, 16, 0, CU_AD_FORMAT_FLOAT, 2).status, CUDA_SUCCESS);  // 2 KiB
  EXPECT_EQ(t.call([](wire::Call::Builder c) { c.initMemAlloc().setSize(2048); }).status, CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(destroyArray(t, 402).status, CUDA_SUCCESS);
  EXPECT_EQ(t.call([](wire::Call::Builder c) { c.initMemAlloc().setSize(2048); }).status, CUDA_SUCCESS);
}

TEST(ArraySession, AnArrayUnderALiveTextureOutlivesItsDestroy) {
  Tenant t(server());
  size_t arraysBefore = liveArrays();
  ASSERT_EQ(createArray(t, 500, 4, 4).status, CUDA_SUCCESS);
  Answer texture = createTexture(t, 500);
  ASSERT_EQ(texture.status, CUDA_SUCCESS);
  EXPECT_EQ(destroyArray(t, 500).status, CUDA_SUCCESS);
  EXPECT_EQ(liveArrays(), arraysBefore + 1);  // kept for the texture
  EXPECT_EQ(toArray(t, 500, {}, 16, 1, 1, std::string(16, '\0')).status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(createTexture(t, 500).status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(destroyObject(t, texture.value, false).status, CUDA_SUCCESS);
  EXPECT_EQ(liveArrays(), arraysBefore);
}

TEST(ArraySession, ATenantsEndDestroysItsArraysAndObjects) {
  size_t arraysBefore = liveArrays(), objectsBefore = liveObjects();
  {
    Tenant t(server());
    ASSERT_EQ(createArray(t, 600, 8, 8, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST).status, CUDA_SUCCESS);
    ASSERT_EQ(createArray(t, 601, 8, 8, 4).status, CUDA_SUCCESS);
    ASSERT_EQ(createTexture(t, 600).status, CUDA_SUCCESS);
    ASSERT_EQ(createSurface(t, 600).status, CUDA_SUCCESS);
    ASSERT_EQ(createTexture(t, 601).status, CUDA_SUCCESS);
    EXPECT_EQ(destroyArray(t, 601).status, CUDA_SUCCESS);  // retired under its texture
    EXPECT_EQ(liveArrays(), arraysBefore + 2);
    EXPECT_EQ(liveObjects(), objectsBefore + 3);
    t.leave();
  }
  EXPECT_EQ(liveArrays(), arraysBefore);
  EXPECT_EQ(liveObjects(), objectsBefore);
}

TEST(ArraySession, MipmappedArraysLevelsQuotaAndOwnership) {
  size_t before = liveMipmapped();
  {
    Tenant a(quotaServer()), b(server());
    // 32x32 + 16x16 + 8x8 floats = 5376 bytes: past the 4096-byte quota; two levels (5120) too.
    EXPECT_EQ(createMipmapped(a, 700, 32, 32, 3).status, CUDA_ERROR_OUT_OF_MEMORY);
    ASSERT_EQ(createMipmapped(a, 700, 16, 16, 3).status, CUDA_SUCCESS);  // 1344 bytes
    EXPECT_EQ(createMipmapped(a, 701, 16, 16, 6).status, CUDA_ERROR_INVALID_VALUE);  // 16 has 5 levels
    EXPECT_EQ(createMipmapped(a, 702, 16, 16, 0).status, CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initMemAlloc().setSize(2800); }).status, CUDA_ERROR_OUT_OF_MEMORY);
    // Level 1 is an 8x8 array: filled and read back like any array, never destroyed alone.
    ASSERT_EQ(getLevel(a, 700, 1, 710).status, CUDA_SUCCESS);
    EXPECT_EQ(getLevel(a, 700, 3, 711).status, CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(getLevel(a, 700, 0, 710).status, CUDA_ERROR_INVALID_VALUE);  // id in use
    ASSERT_EQ(toArray(a, 710, {}, 32, 8, 1, sequence(256)).status, CUDA_SUCCESS);
    EXPECT_EQ(fromArray(a, 710, {0, 7, 0}, 32, 1, 1), sequence(256).substr(224));
    EXPECT_EQ(toArray(a, 710, {}, 32, 9, 1, std::string(288, '\0')).status, CUDA_ERROR_INVALID_VALUE);  // 8 rows
    EXPECT_EQ(destroyArray(a, 710).status, CUDA_ERROR_INVALID_HANDLE);
    // b can name neither the mipmapped array nor its level.
    EXPECT_EQ(getLevel(b, 700, 0, 720).status, CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(fromArray(b, 710, {}, 32, 1, 1), "");
    EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initMipmappedArrayDestroy().setArray(700); }).status,
              CUDA_ERROR_INVALID_HANDLE);
    Answer foreign = b.call([](wire::Call::Builder c) {
      auto m = c.initTextureCreate();
      m.initResource().setMipmappedArray(700);
      m.initTexture();
    });
    EXPECT_EQ(foreign.status, CUDA_ERROR_INVALID_HANDLE);
    // A texture over the mipmapped array keeps it (and its levels' memory) past its destroy.
    Answer texture = a.call([](wire::Call::Builder c) {
      auto m = c.initTextureCreate();
      m.initResource().setMipmappedArray(700);
      m.initTexture().setMaxMipmapLevelClamp(2);
    });
    ASSERT_EQ(texture.status, CUDA_SUCCESS);
    EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initMipmappedArrayDestroy().setArray(700); }).status, CUDA_SUCCESS);
    EXPECT_EQ(liveMipmapped(), before + 1);
    EXPECT_EQ(fromArray(a, 710, {}, 32, 1, 1), "");  // the level went with it
    EXPECT_EQ(destroyObject(a, texture.value, false).status, CUDA_SUCCESS);
    EXPECT_EQ(liveMipmapped(), before);
    EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initMemAlloc().setSize(2800); }).status, CUDA_SUCCESS);
    // One left for the end of the tenancy, with a texture over one of its levels.
    ASSERT_EQ(createMipmapped(a, 703, 8, 8, 2).status, CUDA_SUCCESS);
    ASSERT_EQ(getLevel(a, 703, 1, 712).status, CUDA_SUCCESS);
    ASSERT_EQ(createTexture(a, 712).status, CUDA_SUCCESS);
    EXPECT_EQ(liveMipmapped(), before + 1);
  }
  EXPECT_EQ(liveMipmapped(), before);
}

}  // namespace
}  // namespace tally
