#include "server/scheduler/decisions.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tally::server::scheduler {

bool HpActivity::submitted(Nanos now) {
  idleSeen_ = false;
  idleSince_ = now;
  bool wasOpen = open_;
  open_ = false;
  return wasOpen;
}

bool HpActivity::observe(Nanos now, bool hpBusy) {
  if (hpBusy) {
    idleSeen_ = false;
    return false;
  }
  if (!idleSeen_) {
    idleSeen_ = true;
    idleSince_ = now;
  }
  if (open_ || now - idleSince_ < idleWindow_) return false;
  open_ = true;
  return true;
}

bool PartitionSplit::noteWork(bool highPriority, Nanos now) {
  (highPriority ? lastHp_ : lastBe_).store(now, std::memory_order_relaxed);
  return split(now);
}

bool PartitionSplit::split(Nanos now) const {
  return now - lastHp_.load(std::memory_order_relaxed) < idleWindow_ &&
         now - lastBe_.load(std::memory_order_relaxed) < idleWindow_;
}

double PartitionController::p99(std::vector<double>& samples) {
  size_t k = (samples.size() * 99) / 100;
  if (k >= samples.size()) k = samples.size() - 1;
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(k), samples.end());
  return samples[k];
}

void PartitionController::observeHpWait(double micros) {
  window_.push_back(micros);
  if (mode_ == Mode::kSplit) ++splitSince_;
  if (window_.size() >= knobs_.window) finishWindow();
}

void PartitionController::finishWindow() {
  const double tail = p99(window_);
  window_.clear();
  switch (mode_) {
    case Mode::kSplit:
      splitP99_ = tail;
      if (splitSince_ >= probeEvery_) {
        mode_ = Mode::kProbing;
        ++probes_;
      }
      return;
    case Mode::kProbing:
    case Mode::kSharing:
      sharedP99_ = tail;
      if (splitP99_ > 0 && tail <= knobs_.tolerance * splitP99_) {
        if (mode_ == Mode::kProbing) probeEvery_ = knobs_.probeEvery;  // sharing pays: forget the back-off
        mode_ = Mode::kSharing;
        return;
      }
      // Sharing hurts HP: split again, and probe less often while it keeps hurting.
      if (mode_ == Mode::kProbing) probeEvery_ = std::min(probeEvery_ * 2, knobs_.maxProbeEvery);
      mode_ = Mode::kSplit;
      splitSince_ = 0;
      return;
  }
}

LaunchChoice chooseLaunch(const KernelFacts& f, const ChoiceKnobs& k) {
  LaunchChoice c;
  bool learning = !f.originalMicros || f.launchesSeen < k.measureFirst;
  if (learning || !k.useTransforms || (!f.hasPtb && !f.hasSliced)) {
    c.measure = learning || (f.launchesSeen % k.measureEvery == 0);
    return c;
  }
  const double duration = *f.originalMicros;
  if (f.originalWaveBlocks > 0) {
    double blockMicros = duration / std::max(1.0, double(f.blocks) / double(f.originalWaveBlocks));
    if (blockMicros <= k.besideHpBlockMicros) {
      c.besideHp = true;
      c.measure = f.launchesSeen % k.measureEvery == 0;
      return c;
    }
  }
  if (duration <= k.budgetMicros || f.blocks <= 1) {
    c.measure = f.launchesSeen % k.measureEvery == 0;
    return c;  // short enough to wait for
  }
  const bool longEnoughForPtb = duration >= k.ptbMinBudgets * k.budgetMicros || !f.hasSliced;
  if (f.hasPtb && f.waveBlocks > 0 && longEnoughForPtb) {
    // A worker runs one logical block in about duration / waves; a retreat waits for the
    // blocks of the chunk in progress.
    double waves = std::max(1.0, double(f.blocks) / double(f.waveBlocks));
    double blockMicros = duration / waves;
    double fit = std::floor(k.budgetMicros / std::max(blockMicros, 1e-3));
    c.kind = VariantKind::kPtb;
    c.workers = std::min(f.waveBlocks, f.blocks);
    c.chunk = static_cast<uint32_t>(std::clamp(fit, 1.0, double(k.maxChunk)));
    return c;
  }
  c.kind = VariantKind::kSliced;
  uint64_t slices = static_cast<uint64_t>(std::ceil(duration / k.budgetMicros));
  c.slices = std::clamp<uint64_t>(slices, 2, std::min<uint64_t>(k.maxSlices, f.blocks));
  return c;
}

void KernelProfiles::record(const std::string& key, double micros) {
  Entry& e = entries_[key];
  // The first samples set the mean; later ones move it slowly (one noisy run changes little).
  double weight = e.samples < 4 ? 1.0 / double(e.samples + 1) : 0.2;
  e.micros = e.samples == 0 ? micros : e.micros + weight * (micros - e.micros);
  ++e.samples;
}

std::optional<double> KernelProfiles::micros(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.micros;
}

uint64_t KernelProfiles::samples(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.samples;
}

bool KernelProfiles::load(const std::string& path, std::string& error) {
  std::ifstream in(path);
  if (!in) return true;  // nothing learned yet
  std::string line;
  size_t lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    std::istringstream fields(line);
    std::string key;
    double micros = 0;
    uint64_t samples = 0;
    if (!std::getline(fields, key, '\t') || !(fields >> micros >> samples) || micros < 0) {
      error = path + ":" + std::to_string(lineNo) + ": not \"<key>\\t<micros>\\t<samples>\"";
      return false;
    }
    entries_[key] = Entry{micros, samples};
  }
  return true;
}

bool KernelProfiles::save(const std::string& path, std::string& error) const {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& [key, e] : entries_) out << key << '\t' << e.micros << '\t' << e.samples << '\n';
    if (!out.flush()) {
      error = "cannot write " + tmp;
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + tmp + " to " + path;
    return false;
  }
  return true;
}

}  // namespace tally::server::scheduler
