// The priority policy's decisions, kept free of CUDA so that tests can drive them with a
// simulated clock and device (tests/scheduler): when best-effort work may run, which variant a
// best-effort kernel runs as, and what to do with a preempted PTB kernel.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tally::server::scheduler {

using Nanos = int64_t;  // a steady clock's time
// A time before any other: "never", with room to subtract from it.
inline constexpr Nanos kLongAgo = std::numeric_limits<Nanos>::min() / 2;

// When best-effort (BE) work may run: the gate closes the moment high-priority (HP) work is
// submitted and opens once HP has been idle for `idleWindow`.
class HpActivity {
 public:
  explicit HpActivity(Nanos idleWindow) : idleWindow_(idleWindow) {}

  // HP work was submitted. True if the gate was open (the caller closes it and asks running
  // PTB kernels to retreat).
  bool submitted(Nanos now);
  // The monitor's periodic look: `hpBusy` says whether any HP work is still unfinished on the
  // GPU. True if the gate should open now.
  bool observe(Nanos now, bool hpBusy);
  bool gateOpen() const { return open_; }

 private:
  Nanos idleWindow_;
  bool open_ = true;
  Nanos idleSince_ = 0;
  bool idleSeen_ = false;
};

// Whether a GPU with SM partitions is split right now: while both HP and BE tenants have queued
// work within `idleWindow`, HP works in its partition and BE in the rest, so that no BE block
// occupies an SM HP needs; otherwise whoever is active gets every SM. Lock-free: asked by every
// tenant thread before it queues work, the HP one included.
class PartitionSplit {
 public:
  explicit PartitionSplit(Nanos idleWindow) : idleWindow_(idleWindow) {}
  // A tenant of this class queues work at `now`: true if the GPU is split for it.
  bool noteWork(bool highPriority, Nanos now);
  // Without noting anything.
  bool split(Nanos now) const;

 private:
  Nanos idleWindow_;
  std::atomic<Nanos> lastHp_{kLongAgo};
  std::atomic<Nanos> lastBe_{kLongAgo};
};

// The operator's bound on HP's p99 synchronizing wait while BE work is active: absolute, or a
// factor of HP's own p99 with no BE work active (learned online).
struct HpP99Budget {
  double micros = 0;  // > 0: absolute, µs
  double factor = 0;  // > 0: x HP alone
  bool set() const { return micros > 0 || factor > 0; }
};
// "off" or "" (none), "<µs>us" or "<factor>x" (factor >= 1); nullopt with `error` otherwise.
std::optional<HpP99Budget> parseHpP99Budget(std::string_view text, std::string& error);

// The 99th percentile of `samples` (not empty; reordered): the ceil(1 %)-th largest.
double p99Of(std::vector<double>& samples);

// Which partition level serves the pair of tenants at hand, learned online from HP's
// synchronizing waits while BE is active. Level 0 shares every SM; level i (1..levels) is the
// i-th reserve of SmPartitionSpec, a stronger one bounding what HP waits for behind BE blocks at
// the price of HP's own speed on its partition and BE's on the rest. "Stronger" is the
// operator's order, not a law: next to short BE blocks an overlapped reserve, or none, serves HP
// better than a larger plain one, so the walk does not stop at the first level that hurts.
// - It starts at the strongest level (the safe side).
// - Every `probeEvery` HP waits at a level above 0 it tries a level below for one window of
//   `window` waits and keeps it if HP's p99 there meets the target, else goes back. A failed
//   probe's next try, one window later, goes one level further down, until level 0 has been
//   tried; then the wait before the next probe doubles and the walk starts again one level down.
// - The target is the budget when one is set and some level on the way down met it; otherwise
//   HP's best p99 on the way down (the levels the walk came through) times `tolerance`: where no
//   reserve meets the budget, a smaller one is kept if it serves HP as well as the best seen, so
//   a reserve that buys HP nothing costs BE nothing. A budget relative to HP alone holds the
//   strongest level until HP's p99 alone is known, and judges each wait by its own tenant's p99
//   alone once that is known: a window meets it while at most 1 % of its waits are over their
//   bound.
// - A settled window that misses the target moves back to the level it came from at once; a
//   window has missed as soon as more of its waits are over the target than its p99 allows (2 of
//   200), so a failed probe costs HP a few slow waits rather than a whole window. The strongest
//   level has nowhere to go back to: it probes below whether it met the budget or not.
// - The first half window after any move is not measured (work placed before it still runs
//   where it was).
// - HP seen alone ends the pair: the next one starts at the strongest level again.
// - A level remembered from before (rememberLevel: where an earlier pair settled, kept across
//   restarts) is where the first probe of each pair goes, straight from the strongest level once
//   one window there was measured; if it fails, the walk goes on from the strongest level.
// CUDA-free, one caller at a time (the policy's lock).
class PartitionController {
 public:
  struct Knobs {
    size_t levels = 1;           // reserves (SmPartitionSpec::levels())
    size_t window = 200;         // HP waits per measurement
    size_t probeEvery = 600;     // waits at a level before the first probe of the one below (3 windows)
    size_t maxProbeEvery = 64000;
    double tolerance = 1.1;      // without a budget: kept while p99 <= tolerance x the level above's
    HpP99Budget budget;          // none: the tolerance rule
  };
  PartitionController() : PartitionController(Knobs{}) {}
  explicit PartitionController(Knobs knobs);
  // An HP tenant's synchronizing wait of `micros`, while BE was active. `tenantAloneP99`: that
  // tenant's own p99 with no BE active, when known (0: not known). A budget relative to HP alone
  // judges the wait against it, so a tenant of short requests is not measured by the tail of
  // another's long ones; without it, against the GPU's (aloneP99()).
  void observeHpWait(double micros, double tenantAloneP99 = 0);
  // A wait with no BE work active: what a budget relative to HP alone is relative to.
  void observeHpAloneWait(double micros);
  void setAloneP99(double micros) { aloneP99_ = micros; }  // learned before (kept across restarts)
  void rememberLevel(size_t level);
  // The level of the last window, not a probe, that met its target (nullopt: none yet): what to
  // remember for the next pair.
  std::optional<size_t> settledLevel() const { return settled_; }
  double aloneP99() const { return aloneP99_; }              // 0: not known yet
  double budgetMicros() const;                               // 0: none, or not known yet
  size_t level() const { return level_; }  // 0: share every SM
  bool wantSplit() const { return level_ > 0; }
  uint64_t probes() const { return probes_; }
  // The p99 of the last full window at a level (0: none yet), for logs and tests.
  double p99At(size_t level) const { return p99At_.at(level); }

 private:
  // The bound a wait at level_ is judged by (infinite: always met; -infinite: never): the
  // window meets its target while at most 1 % of its waits are over theirs.
  double targetFor(double tenantAloneP99) const;
  // HP's best p99 at the levels the walk came through to level_ (0: none, at the strongest).
  double bestOnTheWay() const;
  size_t overAllowed() const { return knobs_.window - knobs_.window * 99 / 100; }
  void finishWindow();
  void finishProbe(bool met);
  void moveTo(size_t level);
  void backUp();
  void startProbe();

  Knobs knobs_;
  size_t level_;
  bool probing_ = false;  // level_ is on trial for one window
  std::vector<size_t> path_;  // the levels the walk came down through, strongest first
  std::optional<size_t> remembered_;  // rememberLevel's
  std::optional<size_t> jumpTo_;      // where this pair's first probe goes
  std::optional<size_t> skipTo_;      // where the next probe goes, past one that failed
  bool jumping_ = false;              // the probe on trial went to the remembered level
  std::optional<size_t> settled_;
  size_t probeEvery_;
  size_t sinceProbe_ = 0;  // waits at level_ since it was reached
  size_t settling_ = 0;    // waits right after a move, not measured: work placed before it still runs
  bool pairEnded_ = false;  // HP was seen alone since the last wait with BE active
  std::vector<double> window_;
  size_t overTarget_ = 0;  // waits of window_ over their target
  std::vector<double> aloneWindow_;
  double aloneP99_ = 0;
  std::vector<double> p99At_;
  uint64_t probes_ = 0;
};

// What a BE kernel runs as.
enum class VariantKind { kOriginal, kSliced, kPtb };
struct LaunchChoice {
  VariantKind kind = VariantKind::kOriginal;
  uint64_t slices = 1;   // kSliced
  uint64_t workers = 0;  // kPtb: worker blocks (one wave)
  uint32_t chunk = 1;    // kPtb: logical blocks per claim
  bool measure = false;  // time this launch (to learn the original's duration)
  // Its blocks are so short that HP loses at most one of them per kernel to it: it runs beside
  // HP work (at the lowest stream priority) instead of waiting behind the gate.
  bool besideHp = false;
};

// What a variant's own launches showed: the mean wall time of the whole kernel run as that
// variant (from its first block's start to its last block's end, pauses for HP included), and
// how many such launches were timed.
struct VariantRecord {
  std::optional<double> micros;
  uint64_t timed = 0;
};

struct KernelFacts {
  uint64_t blocks = 0;        // logical blocks of the launch
  uint64_t waveBlocks = 0;    // blocks of the PTB variant one wave holds (occupancy x SMs); 0: unknown
  uint64_t originalWaveBlocks = 0;  // the same for the original
  bool hasSliced = false;     // the variant exists and fits this launch
  bool hasPtb = false;
  std::optional<double> originalMicros;  // learned duration of the original at this shape
  uint64_t originalTimed = 0;            // launches of the original timed so far (kept on disk)
  uint64_t launchesSeen = 0;             // launches of this shape since tallyd started
  VariantRecord sliced;  // the variants' own timings at this shape
  VariantRecord ptb;
};

struct ChoiceKnobs {
  double budgetMicros = 100;  // turnaround: retreat raised -> GPU free of this kernel
  double besideHpBlockMicros = 5;  // blocks at most this long run beside HP work
  bool useTransforms = true;
  uint32_t maxChunk = 64;
  // PTB only for kernels at least this many budgets long: each PTB launch carries a few cheap
  // relaunches and pauses (its resumes); shorter kernels are sliced.
  double ptbMinBudgets = 5;
  uint64_t maxSlices = 64;
  uint64_t measureFirst = 3;   // launches timed before a choice is trusted
  uint64_t measureEvery = 64;  // then one in this many, to follow changes
  // A variant whose timed launches take longer than this x the original's (both timed under
  // the same load, pauses for HP included) does not pay: the original runs instead. 1.4 lets a
  // variant cost BE at most ~30 % of its throughput, the share the isolation targets allow (BE
  // >= 0.7 of alone). It is tried again after `retryEvery` launches of the kernel, so a changed
  // load can bring it back, and after twice as many following each further try (at most
  // 2^maxRetryDoublings times): a try of a variant that does not pay can cost BE dearly (a PTB
  // launch paused behind every HP request).
  double maxVariantSlowdown = 1.4;
  uint64_t retryEvery = 1024;
  unsigned maxRetryDoublings = 6;
};

// Picks the variant for a BE launch: the original when its blocks are tiny (it runs beside HP),
// when it is short enough to wait for, or when it is not known yet (it is timed); else PTB with
// the largest chunk whose expected turnaround (a chunk of blocks per worker) fits the budget for
// long kernels, and slices short enough to fit it for the others (or when there is no PTB). A
// variant is timed on its first launches and then now and then; one whose timings show it does
// not pay (ChoiceKnobs::maxVariantSlowdown) gives way to the other variant, then the original.
LaunchChoice chooseLaunch(const KernelFacts& facts, const ChoiceKnobs& knobs);
// Whether `variant` is worth running for a kernel whose original takes `originalMicros`: not
// yet timed enough to tell, or no slower than the knob allows.
bool variantPays(const VariantRecord& variant, double originalMicros, const ChoiceKnobs& knobs);

// Learned original durations per kernel shape, kept on disk between runs (one line per key:
// "<key>\t<micros>\t<samples>").
class KernelProfiles {
 public:
  void record(const std::string& key, double micros);
  void set(const std::string& key, double value);  // a value that is replaced, not averaged
  std::optional<double> micros(const std::string& key) const;
  uint64_t samples(const std::string& key) const;
  bool load(const std::string& path, std::string& error);
  bool save(const std::string& path, std::string& error) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    double micros = 0;  // exponentially weighted mean
    uint64_t samples = 0;
  };
  std::map<std::string, Entry> entries_;
};


}  // namespace tally::server::scheduler
