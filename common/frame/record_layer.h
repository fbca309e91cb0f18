// A connection whose bytes travel as records (TLS) rather than as they are. The framing code
// stays the same for every transport: writers hand plaintext to `sendSealed`, which seals it and
// sends the records on the socket; StreamReader receives records from the socket and reads the
// plaintext they open to. Everything runs on the threads that already read and write the
// connection: no relay thread, no second socket.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tally::frame {

class RecordLayer {
 public:
  virtual ~RecordLayer() = default;
  // Seals `size` plaintext bytes into records appended to `wire`, after any bytes the layer
  // itself still has to send. One writer at a time (the connection's send lock); safe beside a
  // reader. False with `error` when the layer failed.
  virtual bool seal(const void* plain, size_t size, std::vector<char>& wire, std::string& error) = 0;
  // Takes bytes received from the socket. Safe beside a writer.
  virtual bool absorb(const void* wire, size_t size, std::string& error) = 0;
  // Up to `size` plaintext bytes of the records absorbed so far: > 0 bytes; 0 when no whole record
  // waits; -1 when the peer closed the stream (peerClosed()) or sent what does not open (`error`).
  // The reader's thread only.
  virtual ssize_t open(void* plain, size_t size, std::string& error) = 0;
  virtual bool peerClosed() const = 0;
  // Plaintext that open() returns without another absorb().
  virtual bool hasPlaintext() const = 0;
};

// Copies bytes the caller does not own (an application's buffer); false: unreadable (EFAULT).
using ForeignCopyFn = bool (*)(void* dst, const void* src, size_t size);

// Seals `parts` and sends the records on the blocking socket `fd`; parts from `firstForeign` on
// are read with `foreignCopy`. Small parts share a record (one send for a small frame). Returns
// the plaintext bytes sent; `error` is 0, EFAULT (a foreign part was unreadable: bytes before it
// are sent), EPROTO (the layer failed) or the errno of the send that stopped it.
size_t sendSealed(int fd, RecordLayer& layer, std::span<const iovec> parts, int& error, size_t firstForeign = SIZE_MAX,
                  ForeignCopyFn foreignCopy = nullptr);

}  // namespace tally::frame
