#include "client/transport/bulk_lanes.h"

#include "client/transport/host_memory.h"
#include "common/frame/shared_ring.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tally::client {

namespace {

// Host-to-device chunks: 1 MiB dealt round-robin, so that every staging piece tallyd fills is
// filled by every lane at once; smaller copies are cut into one chunk per lane.
constexpr size_t kMaxChunk = 1u << 20;
constexpr size_t kMinChunk = 256u << 10;

frame::FrameLimits laneLimits() {
  frame::FrameLimits limits;
  limits.maxMessageBytes = 1u << 20;
  limits.maxBulkBytes = 64u << 20;
  return limits;
}

// Sends JoinLane and reads tallyd's answer; "" when the lane was accepted.
std::string joinLane(int fd, frame::RecordLayer* records, frame::StreamReader& reader, uint64_t tenantId,
                     kj::ArrayPtr<const kj::byte> key, unsigned index) {
  capnp::MallocMessageBuilder message(64);
  auto join = message.initRoot<wire::ClientMessage>().initJoinLane();
  join.setTenantId(tenantId);
  join.setKey(key);
  join.setIndex(static_cast<uint8_t>(index));
  auto words = capnp::messageToFlatArray(message);
  if (frame::IoStatus sent = frame::writeFrame(frame::Channel{fd, nullptr, records}, words, {}); !sent.ok) {
    return "cannot send JoinLane: " + sent.error;
  }
  frame::IncomingFrame answer;
  if (frame::IoStatus got = answer.readMessage(reader, laneLimits()); !got.ok) return "no answer to JoinLane: " + got.error;
  auto root = answer.message().getRoot<wire::ServerMessage>();
  if (!root.isWelcome()) return "tallyd answered JoinLane with something else";
  if (!root.getWelcome().getAccepted()) return root.getWelcome().getError();
  return {};
}

}  // namespace

std::unique_ptr<BulkLanes> BulkLanes::open(const Connect& connect, uint64_t tenantId, kj::ArrayPtr<const kj::byte> key,
                                           unsigned count, HostDataSink sink, FailureSink failed, std::string& error) {
  std::unique_ptr<BulkLanes> lanes(new BulkLanes());
  lanes->sink_ = std::move(sink);
  lanes->failed_ = std::move(failed);
  for (unsigned i = 0; i < count; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->fd = connect(lane->records, error);
    if (lane->fd < 0) return nullptr;
    lane->reader = std::make_unique<frame::StreamReader>(lane->fd);
    lane->reader->useRecords(lane->records.get());
    lanes->lanes_.push_back(std::move(lane));
    Lane& joined = *lanes->lanes_.back();
    try {
      if (std::string why = joinLane(joined.fd, joined.records.get(), *joined.reader, tenantId, key, i); !why.empty()) {
        error = "bulk lane " + std::to_string(i) + ": " + why;
        return nullptr;
      }
    } catch (const kj::Exception& e) {
      error = "bulk lane " + std::to_string(i) + ": malformed answer: " + e.getDescription().cStr();
      return nullptr;
    }
  }
  for (unsigned i = 0; i < count; ++i) {
    BulkLanes* self = lanes.get();
    lanes->lanes_[i]->writer = std::thread([self, i] { self->write(i); });
    lanes->lanes_[i]->receiver = std::thread([self, i] { self->receive(i); });
  }
  return lanes;
}

BulkLanes::~BulkLanes() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  for (auto& lane : lanes_) ::shutdown(lane->fd, SHUT_RDWR);
  for (auto& lane : lanes_) {
    if (lane->writer.joinable()) lane->writer.join();
    if (lane->receiver.joinable()) lane->receiver.join();
    ::close(lane->fd);
  }
}

CUresult BulkLanes::send(uint64_t token, const char* src, size_t size) {
  size_t chunk = std::clamp((size + count() - 1) / count(), kMinChunk, kMaxChunk);
  std::unique_lock lock(mutex_);
  share_ = Share{token, src, size, chunk};
  for (auto& lane : lanes_) {
    lane->busy = true;
    lane->error = 0;
  }
  changed_.notify_all();
  changed_.wait(lock, [&] { return std::none_of(lanes_.begin(), lanes_.end(), [](const auto& l) { return l->busy; }); });
  CUresult result = CUDA_SUCCESS;
  for (const auto& lane : lanes_) {
    if (lane->error == EFAULT && result == CUDA_SUCCESS) result = CUDA_ERROR_INVALID_VALUE;
    if (lane->error != 0 && lane->error != EFAULT) result = CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  return result;
}

void BulkLanes::write(unsigned index) {
  Lane& lane = *lanes_[index];
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return lane.busy || closing_; });
      if (closing_) {
        lane.busy = false;
        changed_.notify_all();
        return;
      }
    }
    int error = writeShare(lane, index);
    {
      std::lock_guard lock(mutex_);
      lane.busy = false;
      lane.error = error;
    }
    changed_.notify_all();
    if (error != 0 && error != EFAULT) failed_(fmt::format("bulk lane {}: send failed: {}", index, std::strerror(error)));
  }
}

int BulkLanes::writeShare(Lane& lane, unsigned index) {
  Share share;
  {
    std::lock_guard lock(mutex_);
    share = share_;
  }
  const frame::Channel out{lane.fd, nullptr, lane.records.get()};
  const size_t stride = share.chunk * count();
  int result = 0;
  for (size_t offset = index * share.chunk; offset < share.size; offset += stride) {
    size_t bytes = std::min(share.chunk, share.size - offset);
    capnp::MallocMessageBuilder message(64);
    auto data = message.initRoot<wire::ClientMessage>().initLaneData();
    data.setToken(share.token);
    data.setOffset(offset);
    auto words = capnp::messageToFlatArray(message);
    frame::FrameHeader header = frame::makeHeader(words.asBytes().size(), bytes);
    iovec parts[] = {{&header, sizeof(header)},
                     {words.asBytes().begin(), words.asBytes().size()},
                     {const_cast<char*>(share.src + offset), bytes}};
    int error = 0;
    // Parts 0 and 1 are ours; the bytes are the application's (copyIn: EFAULT, not a signal).
    size_t sent = frame::sendCounting(out, parts, error, 2, host_memory::copyIn);
    if (error == EFAULT) {  // zeros instead, so that tallyd's range still fills
      if (frame::IoStatus padded = frame::writeZeros(out, sizeof(header) + words.asBytes().size() + bytes - sent);
          !padded.ok) {
        return EPIPE;
      }
      result = EFAULT;
    } else if (error != 0) {
      return error;
    }
  }
  return result;
}

void BulkLanes::receive(unsigned index) {
  Lane& lane = *lanes_[index];
  frame::IncomingFrame frame;
  std::vector<char> bounce;
  auto closing = [&] {
    std::lock_guard lock(mutex_);
    return closing_;
  };
  for (;;) {
    frame::IoStatus status = frame.readMessage(*lane.reader, laneLimits());
    if (!status.ok) {
      if (!closing()) failed_(fmt::format("bulk lane {}: {}", index, status.error));
      return;
    }
    try {
      auto root = frame.message().getRoot<wire::ServerMessage>();
      if (!root.isHostData()) {
        failed_(fmt::format("bulk lane {}: tallyd sent a message other than HostData", index));
        return;
      }
      if (!sink_(root.getHostData(), frame.bulkBytes(), *lane.reader, bounce)) {
        if (!closing()) failed_(fmt::format("bulk lane {} broke in the middle of a copy", index));
        return;
      }
    } catch (const kj::Exception& e) {
      failed_(fmt::format("bulk lane {}: malformed message: {}", index, e.getDescription().cStr()));
      return;
    }
  }
}

}  // namespace tally::client
