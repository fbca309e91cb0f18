#include "server/session/fault_history.h"

#include <fmt/format.h>

#include <sstream>

namespace tally::server::session {

namespace {

std::string hexOf(const std::string& text) {
  std::string out;
  for (unsigned char c : text) out += fmt::format("{:02x}", c);
  return out;
}

bool unhex(const std::string& hex, std::string& out) {
  if (hex.size() % 2 != 0) return false;
  out.clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned value = 0;
    if (std::sscanf(hex.c_str() + i, "%2x", &value) != 1) return false;
    out += static_cast<char>(value);
  }
  return true;
}

int64_t secondsOf(FaultHistory::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

FaultHistory::FaultHistory(const FaultHistory& other) : rule_(other.rule_) {
  std::lock_guard lock(other.mutex_);
  total_ = other.total_;
  lastSummary_ = other.lastSummary_;
  faults_ = other.faults_;
}

FaultHistory& FaultHistory::operator=(const FaultHistory& other) {
  if (this == &other) return *this;
  FaultHistory copy(other);
  std::scoped_lock lock(mutex_);
  rule_ = copy.rule_;
  total_ = copy.total_;
  lastSummary_ = std::move(copy.lastSummary_);
  faults_ = std::move(copy.faults_);
  return *this;
}

void FaultHistory::record(const std::vector<std::string>& culprits, const std::string& summary, Clock::time_point at) {
  std::lock_guard lock(mutex_);
  ++total_;
  lastSummary_ = summary;
  if (culprits.size() == 1) faults_[culprits.front()].push_back(at);
}

std::optional<FaultHistory::Clock::time_point> FaultHistory::refusedUntil(const std::string& tenant,
                                                                         Clock::time_point now) const {
  if (rule_.after == 0) return std::nullopt;
  std::lock_guard lock(mutex_);
  auto it = faults_.find(tenant);
  if (it == faults_.end() || it->second.size() < rule_.after) return std::nullopt;
  // The rule's count of faults, the last of them within the window of the first: refused for
  // `duration` after the last.
  const auto& times = it->second;
  Clock::time_point last = times.back();
  Clock::time_point first = times[times.size() - rule_.after];
  if (last - first > rule_.window) return std::nullopt;
  Clock::time_point until = last + rule_.duration;
  if (now >= until) return std::nullopt;
  return until;
}

uint64_t FaultHistory::total() const {
  std::lock_guard lock(mutex_);
  return total_;
}

std::map<std::string, uint64_t> FaultHistory::faultsByTenant() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, uint64_t> out;
  for (const auto& [name, times] : faults_) out[name] = times.size();
  return out;
}

std::string FaultHistory::lastSummary() const {
  std::lock_guard lock(mutex_);
  return lastSummary_;
}

std::string FaultHistory::serialize() const {
  std::lock_guard lock(mutex_);
  std::string out = fmt::format("total {}\nlast {}\n", total_, hexOf(lastSummary_));
  for (const auto& [name, times] : faults_) {
    out += "tenant " + hexOf(name);
    for (auto t : times) out += fmt::format(" {}", secondsOf(t));
    out += '\n';
  }
  return out;
}

bool FaultHistory::parse(const std::string& text) {
  uint64_t total = 0;
  std::string last;
  std::map<std::string, std::vector<Clock::time_point>> faults;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string kind, value;
    fields >> kind >> value;
    if (kind == "total") {
      if (std::sscanf(value.c_str(), "%lu", &total) != 1) return false;
    } else if (kind == "last") {
      if (!unhex(value, last)) return false;
    } else if (kind == "tenant") {
      std::string name;
      if (!unhex(value, name)) return false;
      int64_t seconds = 0;
      while (fields >> seconds) faults[name].push_back(Clock::time_point(std::chrono::seconds(seconds)));
      if (!fields.eof()) return false;
    } else if (!kind.empty()) {
      return false;
    }
  }
  std::lock_guard lock(mutex_);
  total_ += total;
  if (!last.empty()) lastSummary_ = last;
  for (auto& [name, times] : faults) {
    auto& mine = faults_[name];
    mine.insert(mine.begin(), times.begin(), times.end());
  }
  return true;
}

}  // namespace tally::server::session
