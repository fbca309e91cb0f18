// The cuBLAS / cuBLASLt / cuDNN objects one tenant holds inside tallyd — handles, descriptors,
// backend descriptors — under the ids its client chose. A tenant names only its own (the table is
// per tenant) and only as the type it was created as (a tensor descriptor's id is no filter
// descriptor). Pure bookkeeping: destroying is the library's, through the function each object
// carries, called at release in reverse order of creation (descriptors before the handles they
// may reference).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

struct LibraryObject {
  uint32_t type = 0;                    // library::functionId of the C type name
  void* object = nullptr;               // the library's handle or descriptor
  void (*destroy)(void*) = nullptr;     // how release() frees it
  gpu::Gpu* gpu = nullptr;              // handles: the device they were created on
  uint64_t streamId = 0;                // handles: the client's id of the stream their work goes to
  std::shared_ptr<void> keepalive;      // host bytes the library keeps a pointer to (by-value tensors)
  // Handles: how the library is pointed at a driver stream, and the one it points at now. A
  // tenant stream's driver stream changes when it moves between SM partitions, so every call
  // through the handle re-points it (LibraryCall::handle).
  int (*bindStream)(void* handle, CUstream stream) = nullptr;
  CUstream boundStream = nullptr;
};

class LibraryObjectTable {
 public:
  explicit LibraryObjectTable(uint64_t maxObjects = 1u << 20) : maxObjects_(maxObjects) {}

  // False if `id` is taken or the table is full.
  bool insert(uint64_t id, LibraryObject object);
  // The object under `id` if it was created as `type`, else nullptr.
  LibraryObject* find(uint64_t id, uint32_t type);
  bool erase(uint64_t id);
  // Forgets every object and returns them, newest first (the order to destroy them in).
  std::vector<LibraryObject> takeAll();
  size_t size() const { return objects_.size(); }

 private:
  uint64_t maxObjects_;
  std::map<uint64_t, LibraryObject> objects_;
  std::vector<uint64_t> order_;  // creation order (ids are the client's, not monotonic)
};

}  // namespace tally::server::session
