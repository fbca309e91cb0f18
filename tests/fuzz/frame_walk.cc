#include "tests/fuzz/frame_walk.h"

#include "common/frame/socket_io.h"
#include "schema/envelope.capnp.h"

#include <capnp/dynamic.h>
#include <capnp/schema.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tally::fuzz {

namespace {

// Small limits keep each input cheap; the reader's small buffer also exercises the path
// where large reads bypass it.
constexpr frame::FrameLimits kLimits{16 << 10, 32 << 10};
constexpr size_t kReaderBufferBytes = 4096;

// Keeps the compiler from dropping reads whose results are otherwise unused.
volatile uint64_t gSink = 0;

void walkValue(const capnp::DynamicValue::Reader& value);

void walkStruct(capnp::DynamicStruct::Reader s) {
  for (capnp::StructSchema::Field field : s.getSchema().getNonUnionFields()) {
    if (s.has(field)) walkValue(s.get(field));
  }
  KJ_IF_MAYBE(field, s.which()) { walkValue(s.get(*field)); }
}

void walkValue(const capnp::DynamicValue::Reader& value) {
  switch (value.getType()) {
    case capnp::DynamicValue::BOOL: gSink = gSink + value.as<bool>(); break;
    case capnp::DynamicValue::INT: gSink = gSink + static_cast<uint64_t>(value.as<int64_t>()); break;
    case capnp::DynamicValue::UINT: gSink = gSink + value.as<uint64_t>(); break;
    case capnp::DynamicValue::FLOAT: gSink = gSink + static_cast<uint64_t>(value.as<double>() != 0); break;
    case capnp::DynamicValue::TEXT: {
      capnp::Text::Reader text = value.as<capnp::Text>();
      gSink = gSink + text.size() + (text.size() > 0 ? static_cast<uint8_t>(text[0]) : 0);
      break;
    }
    case capnp::DynamicValue::DATA: {
      capnp::Data::Reader data = value.as<capnp::Data>();
      gSink = gSink + data.size() + (data.size() > 0 ? data[data.size() - 1] : 0);
      break;
    }
    case capnp::DynamicValue::ENUM: gSink = gSink + value.as<capnp::DynamicEnum>().getRaw(); break;
    case capnp::DynamicValue::LIST:
      for (capnp::DynamicValue::Reader element : value.as<capnp::DynamicList>()) walkValue(element);
      break;
    case capnp::DynamicValue::STRUCT: walkStruct(value.as<capnp::DynamicStruct>()); break;
    default: break;
  }
}

// The typed reads tallyd's session makes before dispatch (Hello; each call's id and arm).
void walkTyped(wire::ClientMessage::Reader message) {
  if (message.isHello()) {
    auto hello = message.getHello();
    gSink = gSink + hello.getProtocolVersion() + hello.getTenantName().size() + hello.getAuthToken().size() +
            hello.getClientHost().size() + hello.getClientPid() + static_cast<uint64_t>(hello.getPriority());
    return;
  }
  for (wire::Call::Reader call : message.getCalls()) gSink = gSink + call.getId() + static_cast<uint64_t>(call.which());
}

// Decodes and walks one frame's message; false if it was malformed.
bool walkMessage(frame::IncomingFrame& incoming) {
  try {
    auto message = incoming.message().getRoot<wire::ClientMessage>();
    walkTyped(message);
    walkStruct(capnp::toDynamic(message));
    return true;
  } catch (const kj::Exception&) {
    return false;
  }
}

// Writes as much of the input as the socket takes without blocking, then ends the stream.
void feed(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data += n;
    size -= static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
}

}  // namespace

WalkStats consumeBytes(const uint8_t* data, size_t size) {
  WalkStats stats;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return stats;
  feed(fds[1], data, std::min(size, kMaxInputBytes));
  {
    frame::StreamReader reader(fds[0], kReaderBufferBytes);
    frame::IncomingFrame incoming;
    for (;;) {
      frame::IoStatus status = incoming.readMessage(reader, kLimits);
      if (!status.ok) {
        if (!status.closed) ++stats.rejected;
        break;
      }
      ++stats.frames;
      if (walkMessage(incoming)) {
        ++stats.messages;
      } else {
        ++stats.rejected;
      }
      if (!reader.skip(incoming.bulkBytes()).ok) break;
    }
  }
  ::close(fds[0]);
  ::close(fds[1]);
  return stats;
}

}  // namespace tally::fuzz
