// What the fuzz target and its replay test run on one input: the bytes are sent through a
// socketpair into tally::frame::StreamReader, read frame by frame with IncomingFrame under
// tallyd's checks, and every decoded ClientMessage is walked field by field (every call arm,
// every nested struct, list, text and data) the way tallyd reads it, with kj::Exception caught
// as the session does. Anything else escaping (a crash, a sanitizer report) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tally::fuzz {

// Inputs longer than this are cut (they must fit one socket buffer without blocking).
inline constexpr size_t kMaxInputBytes = 64 << 10;

struct WalkStats {
  size_t frames = 0;     // frames that passed the header checks and decoded
  size_t messages = 0;   // ClientMessages walked to the end without an exception
  size_t rejected = 0;   // frames or messages refused (bad header, malformed message)
};

// Runs one input through the frame reader and the message walk.
WalkStats consumeBytes(const uint8_t* data, size_t size);

}  // namespace tally::fuzz
