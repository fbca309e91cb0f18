#include "server/session/device_visibility.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace tally::server::session {
namespace {

std::string trimmed(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t");
  size_t end = s.find_last_not_of(" \t");
  return begin == std::string::npos ? std::string() : s.substr(begin, end - begin + 1);
}

std::string hexOf(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

// The GPU an entry names, if exactly one.
std::optional<size_t> resolve(const std::string& entry, const std::vector<std::string>& uuids) {
  if (entry.empty()) return std::nullopt;
  if (std::all_of(entry.begin(), entry.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (entry.size() > 6) return std::nullopt;
    size_t ordinal = std::stoul(entry);
    return ordinal < uuids.size() ? std::optional<size_t>(ordinal) : std::nullopt;
  }
  if (entry.rfind("MIG-", 0) == 0) {
    spdlog::warn("a tenant's CUDA_VISIBLE_DEVICES names MIG instance {}: tallyd offers whole GPUs only; its list ends there",
                 entry);
    return std::nullopt;
  }
  if (entry.rfind("GPU-", 0) != 0) return std::nullopt;  // not a GPU of ours
  std::string prefix;
  for (char c : entry.substr(4)) {
    if (c != '-') prefix += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (prefix.empty()) return std::nullopt;
  std::optional<size_t> match;
  for (size_t i = 0; i < uuids.size(); ++i) {
    if (hexOf(uuids[i]).rfind(prefix, 0) != 0) continue;
    if (match) return std::nullopt;  // ambiguous
    match = i;
  }
  return match;
}

}  // namespace

std::vector<size_t> visibleDevices(const std::vector<std::string>& entries, const std::vector<std::string>& uuids,
                                   bool* repeated) {
  std::vector<size_t> out;
  if (repeated != nullptr) *repeated = false;
  for (const std::string& raw : entries) {
    std::optional<size_t> gpu = resolve(trimmed(raw), uuids);
    if (!gpu) break;
    if (std::find(out.begin(), out.end(), *gpu) != out.end()) {
      if (repeated != nullptr) *repeated = true;
      break;
    }
    out.push_back(*gpu);
  }
  return out;
}

}  // namespace tally::server::session
