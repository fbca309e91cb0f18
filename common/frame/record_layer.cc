#include "common/frame/record_layer.h"

#include "common/frame/socket_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace tally::frame {
namespace {

// Plaintext sealed per send: a 16 MiB copy goes out in 256 KiB sends (16 records each), a small
// frame in one record.
constexpr size_t kSealChunk = 256u << 10;

// Per call, not per thread: a runtime linked into the application sends from its exit handlers,
// after the main thread's thread_local objects are gone.
// The plaintext staging is not zeroed: every byte sealed was copied in first.
struct SealBuffers {
  explicit SealBuffers(size_t bytes)
      : capacity(std::min(bytes, kSealChunk)), plain(std::make_unique_for_overwrite<char[]>(capacity)) {}
  size_t capacity;
  std::unique_ptr<char[]> plain;
  std::vector<char> wire;
};

// Seals what `plain` holds and sends it; false with `error` set.
bool flush(int fd, RecordLayer& layer, SealBuffers& buffers, size_t staged, int& error) {
  buffers.wire.clear();
  std::string why;
  if (!layer.seal(buffers.plain.get(), staged, buffers.wire, why)) {
    error = EPROTO;
    return false;
  }
  if (buffers.wire.empty()) return true;
  iovec part{buffers.wire.data(), buffers.wire.size()};
  sendCounting(fd, std::span<const iovec>(&part, 1), error);
  return error == 0;
}

}  // namespace

size_t sendSealed(int fd, RecordLayer& layer, std::span<const iovec> parts, int& error, size_t firstForeign,
                  ForeignCopyFn foreignCopy) {
  size_t total = 0;
  for (const iovec& part : parts) total += part.iov_len;
  SealBuffers buffers(total);
  error = 0;
  size_t sent = 0, staged = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const char* from = static_cast<const char*>(parts[i].iov_base);
    const bool foreign = i >= firstForeign && foreignCopy != nullptr;
    for (size_t left = parts[i].iov_len; left > 0;) {
      size_t chunk = std::min(left, buffers.capacity - staged);
      char* to = buffers.plain.get() + staged;
      bool copied = true;
      if (foreign) {
        copied = foreignCopy(to, from, chunk);
      } else {
        std::memcpy(to, from, chunk);
      }
      if (!copied) {
        if (staged > 0 && flush(fd, layer, buffers, staged, error)) sent += staged;
        if (error == 0) error = EFAULT;
        return sent;
      }
      staged += chunk;
      from += chunk;
      left -= chunk;
      if (staged == buffers.capacity) {
        if (!flush(fd, layer, buffers, staged, error)) return sent;
        sent += staged;
        staged = 0;
      }
    }
  }
  if (staged > 0 && flush(fd, layer, buffers, staged, error)) sent += staged;
  return sent;
}

}  // namespace tally::frame
