#include "client/runtime/capture_table.h"

#include <algorithm>

namespace tally::client {

uint64_t CaptureTable::originOf(uint64_t stream) const {
  if (sequences_.count(stream) != 0) return stream;
  auto it = joined_.find(stream);
  return it == joined_.end() ? 0 : it->second;
}

void CaptureTable::erase(std::map<uint64_t, Sequence>::iterator it) {
  uint64_t origin = it->first;
  for (uint64_t member : it->second.members) joined_.erase(member);
  // Its events belong to a capture that is over; a wait on one is the driver's to refuse.
  std::erase_if(capturedEvents_, [origin](const auto& e) { return e.second == origin; });
  sequences_.erase(it);
  open_.fetch_sub(1, std::memory_order_release);
}

CUresult CaptureTable::admitBegin(uint64_t stream) const {
  std::lock_guard lock(mutex_);
  return originOf(stream) != 0 ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
}

void CaptureTable::begin(uint64_t stream, uint32_t device, uint64_t id, CUstreamCaptureMode mode,
                         std::thread::id thread, bool blocking) {
  std::lock_guard lock(mutex_);
  Sequence s;
  s.id = id;
  s.device = device;
  s.mode = mode;
  s.thread = thread;
  s.blocking = blocking;
  if (sequences_.insert_or_assign(stream, std::move(s)).second) open_.fetch_add(1, std::memory_order_release);
}

CUresult CaptureTable::end(uint64_t stream, std::thread::id self, Ended& out) {
  std::lock_guard lock(mutex_);
  auto it = sequences_.find(stream);
  if (it == sequences_.end()) {
    return joined_.count(stream) != 0 ? CUDA_ERROR_STREAM_CAPTURE_UNMATCHED : CUDA_ERROR_ILLEGAL_STATE;
  }
  if (it->second.mode != CU_STREAM_CAPTURE_MODE_RELAXED && it->second.thread != self) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  out.id = it->second.id;
  out.invalidated = it->second.invalidated;
  erase(it);
  return CUDA_SUCCESS;
}

CaptureTable::Status CaptureTable::status(uint64_t stream) const {
  if (!anyActive()) return {};
  std::lock_guard lock(mutex_);
  uint64_t origin = originOf(stream);
  if (origin == 0) return {};
  const Sequence& s = sequences_.at(origin);
  return {s.invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE, s.id};
}

bool CaptureTable::invalidate(uint64_t stream) {
  if (!anyActive()) return false;
  std::lock_guard lock(mutex_);
  uint64_t origin = originOf(stream);
  if (origin == 0) return false;
  sequences_.at(origin).invalidated = true;
  return true;
}

bool CaptureTable::blockingCaptureOn(uint32_t device) const {
  if (!anyActive()) return false;
  std::lock_guard lock(mutex_);
  return std::any_of(sequences_.begin(), sequences_.end(),
                     [device](const auto& entry) { return entry.second.blocking && entry.second.device == device; });
}

void CaptureTable::eventRecorded(uint64_t event, uint64_t stream) {
  std::lock_guard lock(mutex_);
  if (uint64_t origin = originOf(stream); origin != 0) {
    capturedEvents_[event] = origin;
  } else {
    capturedEvents_.erase(event);
  }
}

void CaptureTable::eventWaited(uint64_t stream, uint64_t event) {
  std::lock_guard lock(mutex_);
  auto it = capturedEvents_.find(event);
  if (it == capturedEvents_.end() || originOf(stream) != 0) return;
  joined_[stream] = it->second;
  sequences_.at(it->second).members.push_back(stream);
}

void CaptureTable::forgetEvent(uint64_t event) {
  std::lock_guard lock(mutex_);
  capturedEvents_.erase(event);
}

void CaptureTable::forgetStream(uint64_t stream) {
  std::lock_guard lock(mutex_);
  if (auto it = sequences_.find(stream); it != sequences_.end()) return erase(it);
  auto joined = joined_.find(stream);
  if (joined == joined_.end()) return;
  std::erase(sequences_.at(joined->second).members, stream);
  joined_.erase(joined);
}

CUresult CaptureTable::checkUnsafeCall(std::thread::id self, CUstreamCaptureMode threadMode) {
  if (!anyActive() || threadMode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  std::lock_guard lock(mutex_);
  bool refused = false;
  for (auto& [origin, s] : sequences_) {
    // Its own capture binds a thread unless begun relaxed; another thread's only if begun
    // global, and only a thread whose own mode is global.
    bool prohibits = s.thread == self ? s.mode != CU_STREAM_CAPTURE_MODE_RELAXED
                                      : s.mode == CU_STREAM_CAPTURE_MODE_GLOBAL && threadMode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (!prohibits) continue;
    s.invalidated = true;
    refused = true;
  }
  return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult CaptureTable::checkDeviceSync(uint32_t device) {
  if (!anyActive()) return CUDA_SUCCESS;
  std::lock_guard lock(mutex_);
  bool refused = false;
  for (auto& [origin, s] : sequences_) {
    if (s.device != device) continue;
    s.invalidated = true;
    refused = true;
  }
  return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CaptureTable& captureTable() {
  static auto* table = new CaptureTable();  // never destroyed: app threads may call CUDA during exit
  return *table;
}

CUstreamCaptureMode& threadCaptureMode() {
  thread_local CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return mode;
}

CUresult refuseUnsafeCallDuringCapture() {
  return captureTable().checkUnsafeCall(std::this_thread::get_id(), threadCaptureMode());
}

}  // namespace tally::client
