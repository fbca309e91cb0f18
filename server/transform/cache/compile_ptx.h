// PTX -> cubin on the host with the toolkit's ptxas, else nvJitLink (no CUDA driver, no GPU needed).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tally::server::transform {

// Compiles a whole PTX module for `arch` ("sm_90") and returns the linked cubin (an ELF image),
// or nullopt with `log` holding why (nvJitLink's error log, or the failing call and its result
// code). On success `log` holds nvJitLink's info log, often empty. Thread-safe: every call has
// its own nvJitLink handle.
std::optional<std::string> compilePtx(std::string_view ptx, std::string_view arch, std::string& log);

}  // namespace tally::server::transform
