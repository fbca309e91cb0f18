// Memory files the client shares with tallyd (pinned memory, the staging ring, host-callback
// words). tallyd maps them and touches them at any time, also after this process is gone; a
// file the client could shrink afterwards would make tallyd take SIGBUS. So every file is
// sealed against shrinking (and against further seal changes) before its descriptor is sent,
// and tallyd can check the seals with F_GET_SEALS.
#pragma once

#include <cuda.h>
#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace tally::client {

// The seals every shared file carries when it is sent.
inline constexpr int kSharedMemfdSeals = F_SEAL_SHRINK | F_SEAL_SEAL;

// A memfd of `size` bytes, sealed with kSharedMemfdSeals; -1 with `error` saying why.
int createSealedMemfd(size_t size, std::string& error);

// Maps `bytes` shared with tallyd (ClientRuntime::mapSharedHostMemory): the local address, and
// where tallyd's GPU sees it (0: the driver there could not register it).
using MapSharedRegion = std::function<CUresult(size_t bytes, void*& local, uint64_t& serverAddress)>;

}  // namespace tally::client
