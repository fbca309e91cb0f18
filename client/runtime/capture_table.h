// Which of this process's streams capture, answered here without a round trip: PyTorch's
// allocator asks cudaStreamIsCapturing / cudaStreamGetCaptureInfo with every allocation.
//
// The client puts a stream into capture (cudaStreamBeginCapture, tallyd's reply carries the
// driver's capture id) and takes it out (cudaStreamEndCapture); another stream joins a capture
// when it waits on an event last recorded in a capturing stream (fork), and leaves it when the
// capture ends. Streams and events are the wire ids the client chose.
//
// The application's capture modes are enforced here, among its own threads: tallyd captures in
// relaxed mode (server/api/graph_api.cc), because the driver applies a mode to every thread of
// tallyd, i.e. to every tenant. A "potentially unsafe" call (cudaMalloc, cudaFree) from a thread
// whose own non-relaxed capture is open, or while another thread's global-mode capture is open
// and the calling thread's mode is global, is refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// and invalidates those captures, as natively. A device-wide sync while a capture is open on
// the device is refused in every mode.
//
// No driver, no connection: unit-tested on its own (tests/unit/client/capture_table_test.cc).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tally::client {

class CaptureTable {
 public:
  struct Status {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    uint64_t id = 0;  // the capture's id (0 when not capturing)
  };
  // What cudaStreamEndCapture takes out of the table.
  struct Ended {
    uint64_t id = 0;
    bool invalidated = false;  // a call refused here invalidated it: tallyd drops the graph
  };

  // Whether any capture is open: one load, the fast path of every check below.
  bool anyActive() const { return open_.load(std::memory_order_acquire) > 0; }

  // CUDA_ERROR_ILLEGAL_STATE, as natively, when `stream` already takes part in a capture.
  CUresult admitBegin(uint64_t stream) const;
  // Records the capture tallyd began on `stream` (its origin), by `thread` in `mode`; `blocking`:
  // the stream synchronizes with the legacy default stream.
  void begin(uint64_t stream, uint32_t device, uint64_t id, CUstreamCaptureMode mode, std::thread::id thread,
             bool blocking = false);
  // Ends the capture `stream` began, with every stream that joined it. The native error when
  // `stream` cannot: CUDA_ERROR_ILLEGAL_STATE (not capturing), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
  // (it joined another stream's capture), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (a capture not
  // begun in relaxed mode, by another thread); the table is then unchanged.
  CUresult end(uint64_t stream, std::thread::id self, Ended& out);
  Status status(uint64_t stream) const;
  // Invalidates the capture `stream` takes part in; false if it takes part in none.
  bool invalidate(uint64_t stream);
  // Whether a blocking stream of `device` began a capture: the legacy default stream may then not
  // be used, nor asked about (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
  bool blockingCaptureOn(uint32_t device) const;

  // Forks and joins: an event recorded in a capturing stream pulls a stream that waits on it
  // into that capture.
  void eventRecorded(uint64_t event, uint64_t stream);
  void eventWaited(uint64_t stream, uint64_t event);
  void forgetEvent(uint64_t event);
  // A destroyed stream leaves its capture; the capture it began ends (tallyd drops it too).
  void forgetStream(uint64_t stream);

  // A "potentially unsafe" call by thread `self`, whose exchange mode is `threadMode`:
  // CUDA_SUCCESS, or CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED with the prohibiting captures invalidated.
  CUresult checkUnsafeCall(std::thread::id self, CUstreamCaptureMode threadMode);
  // A device-wide sync of `device`: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and the device's
  // captures invalidated) while one is open there, whatever the modes.
  CUresult checkDeviceSync(uint32_t device);

 private:
  struct Sequence {
    uint64_t id = 0;
    uint32_t device = 0;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    std::thread::id thread;
    bool blocking = false;
    bool invalidated = false;
    std::vector<uint64_t> members;  // streams that joined through an event (not the origin)
  };

  // The origin of the capture `stream` takes part in, or 0; mutex_ held.
  uint64_t originOf(uint64_t stream) const;
  void erase(std::map<uint64_t, Sequence>::iterator it);  // mutex_ held

  mutable std::mutex mutex_;
  std::atomic<size_t> open_{0};
  std::map<uint64_t, Sequence> sequences_;                 // by origin stream
  std::unordered_map<uint64_t, uint64_t> joined_;          // joined stream -> origin
  std::unordered_map<uint64_t, uint64_t> capturedEvents_;  // event -> origin of its capture
};

// The process's table (never destroyed: application threads may call CUDA during exit).
CaptureTable& captureTable();
// The calling thread's capture interaction mode (cudaThreadExchangeStreamCaptureMode).
CUstreamCaptureMode& threadCaptureMode();
// checkUnsafeCall for the calling thread: what cudaMalloc and cudaFree ask first.
CUresult refuseUnsafeCallDuringCapture();

}  // namespace tally::client
