// The per-thread default stream exports (cudaMemcpy_ptds, cuLaunchKernel_ptsz, ...): what a
// program built with `--default-stream per-thread` calls. Each is its base function with a null
// stream meaning the calling thread's per-thread default stream instead of the legacy one; the
// generated twins (schema/codegen/gen_cuda_stubs.py) call the base inside this scope.
#pragma once

namespace tally::client {

// True on this thread inside a NullStreamIsPerThread scope.
bool nullStreamIsPerThread();

class NullStreamIsPerThread {
 public:
  NullStreamIsPerThread();
  ~NullStreamIsPerThread();
  NullStreamIsPerThread(const NullStreamIsPerThread&) = delete;
  NullStreamIsPerThread& operator=(const NullStreamIsPerThread&) = delete;

 private:
  bool previous_;
};

}  // namespace tally::client
