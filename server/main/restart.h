// Starting tallyd over after a fault of the shared context. A sticky CUDA error cannot be
// cleared inside the process (gpu/fault_monitor.h), so tallyd execs itself: same executable,
// same arguments, same PID (systemd sees no exit), every descriptor closed — the driver's with
// them, which also ends a kernel that never finishes. The fault history travels in the
// environment (kFaultHistoryVariable) so quarantines and counters survive.
#pragma once

#include <string>

namespace tally::server {

inline constexpr const char* kFaultHistoryVariable = "TALLY_FAULT_HISTORY";

// Keeps argv for startOver(); call first thing in main.
void rememberCommandLine(int argc, char** argv);

// Replaces this process with a fresh tallyd. Returns only if exec failed; the caller then exits
// with a status that makes systemd restart it.
void startOver(const std::string& faultHistory);

// What a previous incarnation left in the environment (and removes it, so children never see it).
std::string takeFaultHistory();

}  // namespace tally::server
