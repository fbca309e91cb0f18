#include "server/scheduler/decisions.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
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

std::optional<HpP99Budget> parseHpP99Budget(std::string_view text, std::string& error) {
  HpP99Budget budget;
  if (text.empty() || text == "off") return budget;
  const bool micros = text.ends_with("us");
  const bool factor = text.ends_with("x");
  std::string_view number = text.substr(0, text.size() - (micros ? 2 : factor ? 1 : 0));
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if ((!micros && !factor) || ec != std::errc() || end != number.data() + number.size() || !(value > 0) ||
      (factor && value < 1)) {
    error = "HP p99 budget '" + std::string(text) + "': expected off, <µs>us (e.g. 600us) or <factor>x of HP alone (>= 1, e.g. 1.5x)";
    return std::nullopt;
  }
  (micros ? budget.micros : budget.factor) = value;
  return budget;
}

PartitionController::PartitionController(Knobs knobs)
    : knobs_(knobs), level_(knobs.levels), probeEvery_(knobs.probeEvery), p99At_(knobs.levels + 1, 0.0) {}

double p99Of(std::vector<double>& samples) {
  size_t k = (samples.size() * 99) / 100;
  if (k >= samples.size()) k = samples.size() - 1;
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(k), samples.end());
  return samples[k];
}

void PartitionController::observeHpWait(double micros, double tenantAloneP99) {
  if (pairEnded_) {  // a new pair (or the old one back after a pause): from the safe side again
    pairEnded_ = false;
    probing_ = false;
    probeEvery_ = knobs_.probeEvery;
    window_.clear();
    overTarget_ = 0;
    path_.clear();
    skipTo_.reset();
    jumpTo_ = remembered_;
    moveTo(knobs_.levels);
  }
  if (!probing_) ++sinceProbe_;
  const bool over = micros > targetFor(tenantAloneP99);
  if (settling_ > 0) {
    --settling_;
    // Work placed before a probe ran where the walk came from, which served HP: a wait over the
    // target now is the probe's doing, and counts against it at once.
    if (!probing_ || !over) return;
  }
  window_.push_back(micros);
  // Once more waits are over their bound than the window's p99 allows, the window has missed,
  // whatever the rest would be. Deciding then makes a failed probe cost HP a few waits instead of
  // a whole window (and a settled level that starts to miss, too). The strongest level has no
  // level to go back to: its windows run whole, so its p99 is worth comparing with.
  if (over) ++overTarget_;
  const bool missed = overTarget_ >= overAllowed() && !path_.empty();
  if (window_.size() >= knobs_.window || missed) finishWindow();
}

void PartitionController::observeHpAloneWait(double micros) {
  pairEnded_ = true;
  aloneWindow_.push_back(micros);
  if (aloneWindow_.size() < knobs_.window) return;
  aloneP99_ = p99Of(aloneWindow_);
  aloneWindow_.clear();
}

double PartitionController::budgetMicros() const {
  if (knobs_.budget.micros > 0) return knobs_.budget.micros;
  return knobs_.budget.factor * aloneP99_;
}

// A settled level that hurts HP: back to where the walk came from, and probe less often while
// probes keep hurting (a probe that passed and then failed its first settled window counts as
// one that hurt).
void PartitionController::backUp() {
  const size_t to = path_.back();
  path_.pop_back();
  skipTo_.reset();
  probeEvery_ = std::min(probeEvery_ * 2, knobs_.maxProbeEvery);
  moveTo(to);
}

void PartitionController::rememberLevel(size_t level) {
  if (level > knobs_.levels) return;  // from another configuration
  remembered_ = jumpTo_ = level;
}

// One level down; past a level that just failed, further down; for the pair's first probe
// straight to the remembered level.
void PartitionController::startProbe() {
  size_t to = level_ - 1;
  jumping_ = false;
  if (skipTo_ && *skipTo_ < to) {
    to = *skipTo_;
  } else if (jumpTo_ && *jumpTo_ < to) {
    to = *jumpTo_;
    jumping_ = true;
  }
  skipTo_.reset();
  jumpTo_.reset();
  path_.push_back(level_);
  moveTo(to);
  probing_ = true;
  ++probes_;
}

// A probe kept stays; one that failed goes back where it came from, and the next try goes one
// level further down, unless the failed one was level 0 or a jump (levels between untried): then
// the walk waits twice as long and starts again one level down.
void PartitionController::finishProbe(bool met) {
  probing_ = false;
  if (met) {
    moveTo(level_);
    return;
  }
  const size_t failed = level_;
  const size_t from = path_.back();
  path_.pop_back();
  if (failed > 0 && !jumping_) {
    skipTo_ = failed - 1;
  } else {
    probeEvery_ = std::min(probeEvery_ * 2, knobs_.maxProbeEvery);
  }
  moveTo(from);
}

double PartitionController::bestOnTheWay() const {
  double best = 0;
  for (size_t level : path_) {
    const double p99 = p99At_[level];
    if (p99 > 0 && (best == 0 || p99 < best)) best = p99;
  }
  return best;
}

double PartitionController::targetFor(double tenantAloneP99) const {
  constexpr double kAlwaysMet = std::numeric_limits<double>::infinity();
  constexpr double kNeverMet = -kAlwaysMet;
  const double best = bestOnTheWay();
  if (knobs_.budget.set()) {
    const double budget = knobs_.budget.factor > 0 && tenantAloneP99 > 0 ? knobs_.budget.factor * tenantAloneP99
                                                                         : budgetMicros();
    if (budget <= 0) return path_.empty() ? kAlwaysMet : kNeverMet;  // HP alone unknown: stay safe
    // A level on the way down met the budget (its p99, GPU-wide, within the bound): the budget
    // holds. None did: the best of them, within tolerance, is the bound.
    if (path_.empty() || best <= budget) return budget;
    return knobs_.tolerance * best;
  }
  if (path_.empty()) return kAlwaysMet;  // nothing safer to compare with
  return best > 0 ? knobs_.tolerance * best : kNeverMet;
}

void PartitionController::moveTo(size_t level) {
  if (level != level_) settling_ = knobs_.window / 2;
  level_ = level;
  sinceProbe_ = 0;
}

void PartitionController::finishWindow() {
  p99At_[level_] = p99Of(window_);
  window_.clear();
  const bool met = overTarget_ < overAllowed();
  overTarget_ = 0;
  if (probing_) {
    finishProbe(met);
    return;
  }
  if (!met && !path_.empty()) {
    backUp();
    return;
  }
  if (met) settled_ = level_;
  const bool budgetUnknown = knobs_.budget.set() && budgetMicros() <= 0;  // nothing to judge a probe by
  // The pair's first probe to the remembered level, or the next try past a failed one: after
  // one window here.
  const bool soonerDue = (jumpTo_ && *jumpTo_ < level_) || skipTo_;
  if (level_ > 0 && (sinceProbe_ >= probeEvery_ || soonerDue) && !budgetUnknown) startProbe();
}

bool variantPays(const VariantRecord& variant, double originalMicros, const ChoiceKnobs& knobs) {
  if (!variant.micros || variant.timed < knobs.measureFirst) return true;
  return *variant.micros <= knobs.maxVariantSlowdown * originalMicros;
}

namespace {

// Times a variant's first launches, then one in measureEvery, to follow changes of the load.
bool timeVariant(const VariantRecord& variant, const KernelFacts& f, const ChoiceKnobs& k) {
  return variant.timed < k.measureFirst || f.launchesSeen % k.measureEvery == 0;
}

// Whether a variant that did not pay is due another try: every retryEvery launches at first, the
// interval doubling with each timing it got since its first measureFirst.
bool retryDue(const VariantRecord& variant, const KernelFacts& f, const ChoiceKnobs& k) {
  const uint64_t tries = variant.timed > k.measureFirst ? variant.timed - k.measureFirst : 0;
  const uint64_t every = k.retryEvery << std::min<uint64_t>(tries, k.maxRetryDoublings);
  return f.launchesSeen % every == every - 1;
}

}  // namespace

LaunchChoice chooseLaunch(const KernelFacts& f, const ChoiceKnobs& k) {
  LaunchChoice c;
  const bool learning = !f.originalMicros || f.originalTimed < k.measureFirst;
  const bool timeOriginal = learning || f.launchesSeen % k.measureEvery == 0;
  if (learning || !k.useTransforms || (!f.hasPtb && !f.hasSliced)) {
    c.measure = timeOriginal;
    return c;
  }
  const double duration = *f.originalMicros;
  if (f.originalWaveBlocks > 0) {
    double blockMicros = duration / std::max(1.0, double(f.blocks) / double(f.originalWaveBlocks));
    if (blockMicros <= k.besideHpBlockMicros) {
      c.besideHp = true;
      c.measure = timeOriginal;
      return c;
    }
  }
  if (duration <= k.budgetMicros || f.blocks <= 1) {
    c.measure = timeOriginal;
    return c;  // short enough to wait for
  }
  // A variant that did not pay gets another chance now and then (the load may have changed).
  const bool ptbRetry = !variantPays(f.ptb, duration, k) && retryDue(f.ptb, f, k);
  const bool slicedRetry = !variantPays(f.sliced, duration, k) && retryDue(f.sliced, f, k);
  const bool ptbPays = variantPays(f.ptb, duration, k) || ptbRetry;
  const bool slicedPays = variantPays(f.sliced, duration, k) || slicedRetry;
  const bool longEnoughForPtb = duration >= k.ptbMinBudgets * k.budgetMicros || !f.hasSliced || !slicedPays;
  if (f.hasPtb && ptbPays && f.waveBlocks > 0 && longEnoughForPtb) {
    // A worker runs one logical block in about duration / waves; a retreat waits for the
    // blocks of the chunk in progress.
    double waves = std::max(1.0, double(f.blocks) / double(f.waveBlocks));
    double blockMicros = duration / waves;
    double fit = std::floor(k.budgetMicros / std::max(blockMicros, 1e-3));
    c.kind = VariantKind::kPtb;
    c.workers = std::min(f.waveBlocks, f.blocks);
    c.chunk = static_cast<uint32_t>(std::clamp(fit, 1.0, double(k.maxChunk)));
    c.measure = timeVariant(f.ptb, f, k) || ptbRetry;
    return c;
  }
  if (f.hasSliced && slicedPays) {
    c.kind = VariantKind::kSliced;
    uint64_t slices = static_cast<uint64_t>(std::ceil(duration / k.budgetMicros));
    c.slices = std::clamp<uint64_t>(slices, 2, std::min<uint64_t>(k.maxSlices, f.blocks));
    c.measure = timeVariant(f.sliced, f, k) || slicedRetry;
    return c;
  }
  c.measure = timeOriginal;
  return c;  // no variant pays
}

void KernelProfiles::record(const std::string& key, double micros) {
  Entry& e = entries_[key];
  // The first samples set the mean; later ones move it slowly (one noisy run changes little).
  double weight = e.samples < 4 ? 1.0 / double(e.samples + 1) : 0.2;
  e.micros = e.samples == 0 ? micros : e.micros + weight * (micros - e.micros);
  ++e.samples;
}

void KernelProfiles::set(const std::string& key, double value) {
  Entry& e = entries_[key];
  e.micros = value;
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
