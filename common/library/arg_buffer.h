// The byte layout of a forwarded library call's arguments (cuBLAS, cuBLASLt, cuDNN): the
// client appends each parameter in declaration order, tallyd reads them back in the same order.
// What each parameter becomes (a value, an object id, an address, host bytes) is decided by the
// generator (schema/codegen/gen_library_stubs.py) or by the hand-written marshalling of a few
// functions; this header only moves bytes, little-endian, unaligned.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace tally::library {

// A function's id on the wire: FNV-1a of its name, so ids stay stable as functions are added.
constexpr uint32_t functionId(std::string_view name) {
  uint32_t h = 0x811C9DC5u;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x01000193u;
  }
  return h;
}

// Hard caps that keep one call from asking tallyd for unbounded host memory.
inline constexpr uint32_t kMaxHostBytes = 1u << 24;  // one array, output or scalar
inline constexpr uint32_t kMaxScalarBytes = 16;      // the widest scalar: a double complex

class ArgWriter {
 public:
  template <typename T>
  void put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  // Length-prefixed bytes.
  void putBytes(const void* data, uint32_t size) {
    put(size);
    if (size != 0) bytes_.append(static_cast<const char*>(data), size);
  }
  const std::string& bytes() const { return bytes_; }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

// Reads what an ArgWriter wrote. A read past the end marks the reader failed (and yields
// zeros): the caller checks failed() once, after reading everything.
class ArgReader {
 public:
  ArgReader(const void* data, size_t size) : data_(static_cast<const uint8_t*>(data)), size_(size) {}

  template <typename T>
  bool get(T& out) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (size_ - offset_ < sizeof(T)) return fail(out);
    std::memcpy(&out, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return true;
  }
  template <typename T>
  T get() {
    T v{};
    get(v);
    return v;
  }
  // Length-prefixed bytes: a view into the reader's buffer, valid while it is.
  bool getBytes(const uint8_t*& data, uint32_t& size) {
    data = nullptr;
    if (!get(size) || size > kMaxHostBytes || size_ - offset_ < size) {
      size = 0;
      failed_ = true;
      return false;
    }
    data = data_ + offset_;
    offset_ += size;
    return true;
  }
  bool failed() const { return failed_; }
  bool atEnd() const { return offset_ == size_; }

 private:
  template <typename T>
  bool fail(T& out) {
    out = T{};
    failed_ = true;
    offset_ = size_;
    return false;
  }

  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
  bool failed_ = false;
};

// Encodings shared by both sides.
enum class ScalarPlace : uint8_t { kHost = 0, kDevice = 1 };

}  // namespace tally::library
