#include "server/session/completion_words.h"

#include "server/gpu/cuda_check.h"
#include "server/gpu/gpu.h"

#include <spdlog/spdlog.h>

namespace tally::server::session {

std::shared_ptr<CompletionWords> CompletionWords::adopt(std::shared_ptr<frame::SharedRings> rings, gpu::Gpu* g) {
  std::shared_ptr<CompletionWords> words(new CompletionWords(std::move(rings)));
  if (g == nullptr) return words;
  g->makeCurrent();
  char* page = words->rings_->controlPage();
  CUresult r = cuMemHostRegister(page, frame::SharedRings::kControlPageBytes,
                                 CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r != CUDA_SUCCESS) {
    spdlog::debug("completion words: registering the ring file's control page failed: {}; tallyd stores them",
                  gpu::describe(r));
    return words;
  }
  CUdeviceptr device = 0;
  if (cuMemHostGetDevicePointer(&device, page, 0) != CUDA_SUCCESS) {
    cuMemHostUnregister(page);
    return words;
  }
  words->devicePage_ = device;
  return words;
}

CompletionWords::~CompletionWords() {
  if (devicePage_ != 0) cuMemHostUnregister(rings_->controlPage());
}

std::atomic<uint32_t>* CompletionWords::word(uint32_t wireSlot) const {
  if (wireSlot == 0 || wireSlot > frame::SharedRings::kCompletionSlots) return nullptr;
  return &rings_->completionWord(wireSlot - 1);
}

CUdeviceptr CompletionWords::deviceWord(uint32_t wireSlot) const {
  std::atomic<uint32_t>* local = word(wireSlot);
  if (local == nullptr || devicePage_ == 0) return 0;
  return devicePage_ + (reinterpret_cast<char*>(local) - rings_->controlPage());
}

}  // namespace tally::server::session
