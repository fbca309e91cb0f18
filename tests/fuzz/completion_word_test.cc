// The completion word (schema: Call.completionWord) through tallyd's real handlers on the fake
// GPU, whose stream operations run at once: the GPU writes the call id's low 32 bits where the
// client waits only when the reply would say nothing more, and the reply still follows.
#include "tests/fuzz/graph_session_harness.h"

#include <fcntl.h>
#include <sys/mman.h>

namespace tally {
namespace {

// A sealed memfd mapped here, as the client maps the region it shares with tallyd.
class SharedRegion {
 public:
  static constexpr size_t kBytes = 4096;
  SharedRegion() {
    fd_ = ::memfd_create("completion-word-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd_ < 0 || ::ftruncate(fd_, kBytes) != 0 || ::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
      throw std::runtime_error("memfd");
    }
    void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap");
    base_ = static_cast<char*>(p);
  }
  ~SharedRegion() {
    ::munmap(base_, kBytes);
    ::close(fd_);
  }
  uint64_t address(size_t offset) const { return reinterpret_cast<uint64_t>(base_ + offset); }
  uint32_t word(size_t offset) const {
    return __atomic_load_n(reinterpret_cast<const uint32_t*>(base_ + offset), __ATOMIC_ACQUIRE);
  }
  // Registers the region with the tenant's tallyd (what ClientRuntime::mapSharedHostMemory does).
  CUresult share(Tenant& t) const {
    return t.call([&](wire::Call::Builder c) {
      auto h = c.initHostRegister();
      h.setClientAddress(address(0));
      h.setSize(kBytes);
    }, {}, fd_).status;
  }

 private:
  int fd_ = -1;
  char* base_ = nullptr;
};

constexpr size_t kWord = 64, kLanding = 128;

Answer syncNamingWord(Tenant& t, uint64_t word) {
  return t.call([&](wire::Call::Builder c) {
    c.initStreamSynchronize().setStream(kStream);
    c.setCompletionWord(word);
  });
}

TEST(CompletionWord, TheGpuWritesTheCallIdWhereTheClientWaitsAndTheReplyFollows) {
  Tenant t(server());
  uint64_t device = t.prepare();
  SharedRegion region;
  ASSERT_EQ(region.share(t), CUDA_SUCCESS);

  uint64_t id = t.nextId();
  Answer synced = syncNamingWord(t, region.address(kWord));
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(region.word(kWord), static_cast<uint32_t>(id));

  // A small copy into the slot's landing area: the bytes are there when the word is.
  t.post([&](wire::Call::Builder c) {
    auto m = c.initMemset();
    m.setStream(kStream);
    m.setDst(device);
    m.setValue(0x2a);
    m.setWidth(4);
  });
  id = t.nextId();
  Answer copied = t.call([&](wire::Call::Builder c) {
    auto m = c.initMemcpy();
    m.setKind(wire::CopyKind::DEVICE_TO_HOST);
    m.setStream(kStream);
    m.setSrc(device);
    m.setDst(region.address(kLanding));
    m.setWidth(4);
    m.setHostShared(true);
    c.setCompletionWord(region.address(kWord));
  });
  EXPECT_EQ(copied.status, CUDA_SUCCESS);
  EXPECT_EQ(region.word(kWord), static_cast<uint32_t>(id));
  EXPECT_EQ(region.word(kLanding), 0x2a2a2a2au);
}

// The client returns at the word without reading the reply: a reply that reports an earlier
// one-way call's error must be the only answer.
TEST(CompletionWord, NotWrittenWhenTheReplyCarriesADeferredError) {
  Tenant t(server());
  t.prepare();
  SharedRegion region;
  ASSERT_EQ(region.share(t), CUDA_SUCCESS);
  t.post([](wire::Call::Builder c) {  // not the tenant's memory: fails, reported at the next reply
    auto m = c.initMemset();
    m.setStream(kStream);
    m.setDst(0xdead0000);
    m.setWidth(4);
  });
  Answer reported = syncNamingWord(t, region.address(kWord));
  EXPECT_EQ(reported.status, CUDA_SUCCESS);
  EXPECT_EQ(reported.deferred, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(region.word(kWord), 0u);

  uint64_t id = t.nextId();  // reported once: the next sync may end on its word again
  Answer clean = syncNamingWord(t, region.address(kWord));
  EXPECT_EQ(clean.deferred, CUDA_SUCCESS);
  EXPECT_EQ(region.word(kWord), static_cast<uint32_t>(id));
}

// A word the tenant did not share with tallyd, or one not aligned, is never written; the call
// is answered as without it.
TEST(CompletionWord, OnlyAnAlignedWordOfTheTenantsOwnMappingsIsWritten) {
  Tenant t(server());
  t.prepare();
  SharedRegion unshared, shared;
  ASSERT_EQ(shared.share(t), CUDA_SUCCESS);
  EXPECT_EQ(syncNamingWord(t, unshared.address(kWord)).status, CUDA_SUCCESS);
  EXPECT_EQ(unshared.word(kWord), 0u);
  EXPECT_EQ(syncNamingWord(t, shared.address(kWord + 2)).status, CUDA_SUCCESS);
  EXPECT_EQ(shared.word(kWord), 0u);
  EXPECT_EQ(shared.word(kWord + 4), 0u);
  EXPECT_EQ(syncNamingWord(t, shared.address(SharedRegion::kBytes)).status, CUDA_SUCCESS);  // one past the end
}

}  // namespace
}  // namespace tally
