// The fuzzer's bytes, read as choices: every read succeeds (0 once the input is used up), so
// any input decodes into some session, and a mutation of one byte changes one choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tally::fuzz {

class InputBytes {
 public:
  InputBytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return offset_ >= size_; }
  uint8_t u8() { return offset_ < size_ ? data_[offset_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return static_cast<uint64_t>(u32()) | (static_cast<uint64_t>(u32()) << 32); }
  bool flag() { return (u8() & 1) != 0; }
  // One of `count` choices (count > 0).
  size_t choose(size_t count) { return u8() % count; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

}  // namespace tally::fuzz
