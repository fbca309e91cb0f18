// tallyd's request handlers on the fake GPU (fake_gpu/fake_libcuda.cc), in this process: one
// Session per fuzz input over a socketpair, exactly as tallyd runs a connected tenant, with a
// HostileClient on the other end.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tally::fuzz {

// Runs one whole session (handshake, calls, disconnect, release of what the tenant owned).
// The first call opens the fake GPU and tallyd's shared services; aborts if it cannot.
void runSession(const uint8_t* data, size_t size);

}  // namespace tally::fuzz
