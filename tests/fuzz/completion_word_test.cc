// Completion words (schema: Call.completionSlot) through tallyd's real handlers on the fake GPU:
// tallyd stores the call id's low 32 bits into the word of the client's ring file that the call
// names only when the reply would say nothing more, and the reply still follows.
#include "tests/fuzz/graph_session_harness.h"

#include <fcntl.h>
#include <sys/mman.h>

namespace tally {
namespace {

constexpr bool kSharedRings = true;
constexpr uint32_t kSlot = 3;  // on the wire: word kSlot - 1

Answer syncNamingSlot(Tenant& t, uint32_t slot) {
  return t.call([&](wire::Call::Builder c) {
    c.initStreamSynchronize().setStream(kStream);
    c.setCompletionSlot(slot);
  });
}

// Pinned memory the tenant shares with tallyd (a sealed memfd, mapped here as the client maps it).
class SharedPinned {
 public:
  static constexpr size_t kBytes = 4096;
  SharedPinned() {
    fd_ = ::memfd_create("completion-word-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd_ < 0 || ::ftruncate(fd_, kBytes) != 0 || ::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
      throw std::runtime_error("memfd");
    }
    void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap");
    base_ = static_cast<uint32_t*>(p);
  }
  ~SharedPinned() {
    ::munmap(base_, kBytes);
    ::close(fd_);
  }
  uint64_t address() const { return reinterpret_cast<uint64_t>(base_); }
  uint32_t first() const { return __atomic_load_n(base_, __ATOMIC_ACQUIRE); }
  CUresult share(Tenant& t) const {
    return t.call([&](wire::Call::Builder c) {
      auto h = c.initHostRegister();
      h.setClientAddress(address());
      h.setSize(kBytes);
    }, {}, fd_).status;
  }

 private:
  int fd_ = -1;
  uint32_t* base_ = nullptr;
};

TEST(CompletionWord, StoredWithTheCallIdBeforeTheReply) {
  Tenant t(server(), wire::PriorityClass::BEST_EFFORT, kSharedRings);
  uint64_t device = t.prepare();
  uint64_t id = t.nextId();
  Answer synced = syncNamingSlot(t, kSlot);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(t.completionWord(kSlot - 1), static_cast<uint32_t>(id));

  // A copy into pinned memory the tenant shares (what a landing area is): the bytes are there
  // when the word is.
  SharedPinned pinned;
  ASSERT_EQ(pinned.share(t), CUDA_SUCCESS);
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
    m.setDst(pinned.address());
    m.setWidth(4);
    m.setHostShared(true);
    c.setCompletionSlot(kSlot);
  });
  EXPECT_EQ(copied.status, CUDA_SUCCESS);
  EXPECT_EQ(t.completionWord(kSlot - 1), static_cast<uint32_t>(id));
  EXPECT_EQ(pinned.first(), 0x2a2a2a2au);
}

// The client returns at the word without reading the reply: a reply that reports an earlier
// one-way call's error must be the only answer.
TEST(CompletionWord, NotStoredWhenTheReplyCarriesADeferredError) {
  Tenant t(server(), wire::PriorityClass::BEST_EFFORT, kSharedRings);
  t.prepare();
  t.post([](wire::Call::Builder c) {  // not the tenant's memory: fails, reported at the next reply
    auto m = c.initMemset();
    m.setStream(kStream);
    m.setDst(0xdead0000);
    m.setWidth(4);
  });
  Answer reported = syncNamingSlot(t, kSlot);
  EXPECT_EQ(reported.status, CUDA_SUCCESS);
  EXPECT_EQ(reported.deferred, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.completionWord(kSlot - 1), 0u);

  uint64_t id = t.nextId();  // reported once: the next sync may end on its word again
  Answer clean = syncNamingSlot(t, kSlot);
  EXPECT_EQ(clean.deferred, CUDA_SUCCESS);
  EXPECT_EQ(t.completionWord(kSlot - 1), static_cast<uint32_t>(id));
}

// A slot past the ring file's words is ignored, and a tenant without rings has none: the call is
// answered as without one.
TEST(CompletionWord, ASlotOutsideTheRingFileIsIgnored) {
  Tenant t(server(), wire::PriorityClass::BEST_EFFORT, kSharedRings);
  t.prepare();
  for (uint32_t slot : {frame::SharedRings::kCompletionSlots + 1, 0xffffffffu}) {
    EXPECT_EQ(syncNamingSlot(t, slot).status, CUDA_SUCCESS);
  }
  for (unsigned word = 0; word < frame::SharedRings::kCompletionSlots; ++word) EXPECT_EQ(t.completionWord(word), 0u);

  Tenant socketOnly(server());
  socketOnly.prepare();
  EXPECT_EQ(syncNamingSlot(socketOnly, kSlot).status, CUDA_SUCCESS);
}

// The GPU writes a long copy's word where tallyd stores it: the ring file's control page is
// registered, and the device address of word i is that page's plus the word's offset.
TEST(CompletionWord, TheGpuSeesTheWordsWhereTallydStoresThem) {
  std::string why;
  std::shared_ptr<frame::SharedRings> rings(frame::SharedRings::create(frame::SharedRings::kMinCapacity, -1, why));
  ASSERT_NE(rings, nullptr) << why;
  auto words = session::CompletionWords::adopt(rings, openGpus().front());
  for (uint32_t slot = 1; slot <= frame::SharedRings::kCompletionSlots; ++slot) {
    ASSERT_NE(words->word(slot), nullptr);
    // The fake GPU sees host memory at its host address (cuMemHostGetDevicePointer).
    EXPECT_EQ(words->deviceWord(slot), reinterpret_cast<CUdeviceptr>(words->word(slot)));
  }
  EXPECT_EQ(words->word(0), nullptr);
  EXPECT_EQ(words->deviceWord(frame::SharedRings::kCompletionSlots + 1), 0u);
  EXPECT_EQ(session::CompletionWords::adopt(rings, nullptr)->deviceWord(1), 0u);  // no GPU: stored only
}

}  // namespace
}  // namespace tally
