// The client's side of bulk lanes (server/session/bulk_lanes.h): extra connections to tallyd,
// over the tenant's own transport (TCP or TLS), that carry only the bytes of large copies. One
// thread per lane writes host-to-device bytes and one reads device-to-host bytes, so sealing,
// sending and opening a copy's bytes runs on several cores at once instead of one.
//
// Host-to-device: a copy's bytes are cut into chunks dealt round-robin to the lanes, each lane
// writing its chunks in offset order; tallyd reads them into the ranges it asks for in that
// order (bulk_lanes.h explains why this never waits in a circle). Copies go one after the other
// (order()), in the order of their messages on the tenant's connection.
#pragma once

#include "common/frame/socket_io.h"
#include "common/frame/record_layer.h"
#include "schema/envelope.capnp.h"

#include <cuda.h>
#include <kj/array.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tally::client {

class BulkLanes {
 public:
  // A lane's device-to-host bytes: route them from `reader` (false: the lane is unusable).
  using HostDataSink = std::function<bool(wire::HostData::Reader, uint32_t bulkBytes, frame::StreamReader& reader,
                                          std::vector<char>& bounce)>;
  // A lane broke (tallyd went away or refused its bytes): the connection is broken too.
  using FailureSink = std::function<void(const std::string& why)>;
  // Opens the socket of one lane (TCP, and TLS when the tenant's connection is): its fd and
  // records, or fd -1 with `error`.
  using Connect = std::function<int(std::unique_ptr<frame::RecordLayer>& records, std::string& error)>;

  // Opens and joins `count` lanes of tenant `tenantId`; null (and `error`) if one of them fails.
  static std::unique_ptr<BulkLanes> open(const Connect& connect, uint64_t tenantId, kj::ArrayPtr<const kj::byte> key,
                                         unsigned count, HostDataSink sink, FailureSink failed, std::string& error);
  ~BulkLanes();
  BulkLanes(const BulkLanes&) = delete;
  BulkLanes& operator=(const BulkLanes&) = delete;

  unsigned count() const { return static_cast<unsigned>(lanes_.size()); }
  // Held by a copy from its message on the tenant's connection to the last of its bytes here.
  std::mutex& order() { return order_; }
  // Sends `size` bytes of the application's memory at `src` as copy `token`; returns once every
  // lane wrote its share. CUDA_ERROR_INVALID_VALUE: the memory could not be read (zeros went
  // instead, so tallyd's ranges still fill); CUDA_ERROR_DEVICE_UNAVAILABLE: a lane broke.
  CUresult send(uint64_t token, const char* src, size_t size);

  // Copies at least this large go through the lanes; smaller ones are not worth the hand-off.
  static constexpr size_t kMinCopyBytes = 1u << 20;

 private:
  struct Lane {
    int fd = -1;
    std::unique_ptr<frame::RecordLayer> records;
    std::unique_ptr<frame::StreamReader> reader;
    std::thread receiver;
    std::thread writer;
    // The share the writer is asked to send (set by send(), cleared by the writer).
    bool busy = false;
    int error = 0;  // errno of the writer's last share: 0, EFAULT, or the send's
  };
  struct Share {
    uint64_t token = 0;
    const char* src = nullptr;
    size_t size = 0;
    size_t chunk = 0;
  };

  BulkLanes() = default;
  void write(unsigned index);
  void receive(unsigned index);
  // Writes lane `index`'s chunks of the current share; the errno that stopped it, or 0.
  int writeShare(Lane& lane, unsigned index);

  std::vector<std::unique_ptr<Lane>> lanes_;
  HostDataSink sink_;
  FailureSink failed_;
  std::mutex order_;
  std::mutex mutex_;  // share_, busy, closing_
  std::condition_variable changed_;
  Share share_;
  bool closing_ = false;
};

}  // namespace tally::client
