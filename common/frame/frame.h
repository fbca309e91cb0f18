// Framing of Cap'n Proto messages and bulk bytes on a byte stream (UDS or TCP).
//
// A frame is FrameHeader, then `messageBytes` of a flat Cap'n Proto message (a whole number
// of words), then `bulkBytes` of raw payload. Limits are checked before anything is allocated,
// so a peer cannot make us reserve memory by lying in a header.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>

#include <cstdint>
#include <string>

namespace tally::frame {

inline constexpr uint32_t kFrameMagic = 0x544c5931;  // "TLY1"

struct FrameHeader {
  uint32_t magic;
  uint32_t messageBytes;
  uint32_t bulkBytes;
};
static_assert(sizeof(FrameHeader) == 12);

struct FrameLimits {
  uint32_t maxMessageBytes = 1u << 20;   // 1 MiB of Cap'n Proto per frame
  uint32_t maxBulkBytes = 64u << 20;     // 64 MiB of raw payload per frame
};

// Why a header was refused; empty when it is acceptable.
std::string checkHeader(const FrameHeader& header, const FrameLimits& limits);

// Reader options matching the limits: traversal bounded by the message size, nesting bounded.
capnp::ReaderOptions readerOptions(const FrameLimits& limits);

// Serializes a message into one contiguous word array (header not included).
kj::Array<capnp::word> flatten(capnp::MessageBuilder& message);

FrameHeader makeHeader(size_t messageBytes, size_t bulkBytes);

}  // namespace tally::frame
