#include "common/frame/frame.h"

#include <fmt/format.h>

namespace tally::frame {

std::string checkHeader(const FrameHeader& header, const FrameLimits& limits) {
  if (header.magic != kFrameMagic) {
    return fmt::format("bad frame magic 0x{:08x} (not a Tally peer, or TLS/plain mismatch)", header.magic);
  }
  if (header.messageBytes == 0 || header.messageBytes % sizeof(capnp::word) != 0) {
    return fmt::format("message size {} is not a positive multiple of 8", header.messageBytes);
  }
  if (header.messageBytes > limits.maxMessageBytes) {
    return fmt::format("message size {} exceeds limit {}", header.messageBytes, limits.maxMessageBytes);
  }
  if (header.bulkBytes > limits.maxBulkBytes) {
    return fmt::format("bulk size {} exceeds limit {}", header.bulkBytes, limits.maxBulkBytes);
  }
  return {};
}

capnp::ReaderOptions readerOptions(const FrameLimits& limits) {
  capnp::ReaderOptions options;
  // Every word may be visited a few times (lists of structs); 4x the message bounds it.
  options.traversalLimitInWords = 4ull * limits.maxMessageBytes / sizeof(capnp::word);
  options.nestingLimit = 16;
  return options;
}

kj::Array<capnp::word> flatten(capnp::MessageBuilder& message) {
  return capnp::messageToFlatArray(message);
}

FrameHeader makeHeader(size_t messageBytes, size_t bulkBytes) {
  return FrameHeader{kFrameMagic, static_cast<uint32_t>(messageBytes), static_cast<uint32_t>(bulkBytes)};
}

}  // namespace tally::frame
