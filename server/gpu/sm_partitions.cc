#include "server/gpu/sm_partitions.h"

#include <charconv>

namespace tally::server::gpu {

namespace {

std::string specError(std::string_view text) {
  return "SM partition '" + std::string(text) + "': expected off, or up to " + std::to_string(kMaxPartitionLevels) +
         " reserves N (SMs for HP, N > 0) or P% (1-99 % of them), each with an optional :overlap, separated by "
         "commas in increasing strength (larger, or as large without :overlap)";
}

std::string driverError(const char* call, CUresult r) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  return std::string(call) + ": " + (name != nullptr ? name : std::to_string(r));
}

CUresult makeGreenContext(CUdevice device, CUdevResource& resource, CUgreenCtx& out) {
  CUdevResourceDesc desc = nullptr;
  if (CUresult r = cuDevResourceGenerateDesc(&desc, &resource, 1); r != CUDA_SUCCESS) return r;
  return cuGreenCtxCreate(&out, desc, device, CU_GREEN_CTX_DEFAULT_STREAM);
}

}  // namespace

std::optional<SmPartitionSpec> parseSmPartitionSpec(std::string_view text, std::string& error) {
  if (text.empty() || text == "off") return std::nullopt;
  SmPartitionSpec spec;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    SmReserve reserve;
    if (auto colon = item.find(':'); colon != std::string_view::npos) {
      if (item.substr(colon + 1) != "overlap") {
        error = "SM partition '" + std::string(text) + "': the only option after ':' is 'overlap'";
        return std::nullopt;
      }
      reserve.overlap = true;
      item = item.substr(0, colon);
    }
    const bool percent = !item.empty() && item.back() == '%';
    if (percent) item.remove_suffix(1);
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), reserve.size);
    const SmReserve* last = spec.reserves.empty() ? nullptr : &spec.reserves.back();
    // Stronger than the level before: larger, or as large and without overlap.
    const bool stronger = last == nullptr || reserve.size > last->size ||
                          (reserve.size == last->size && last->overlap && !reserve.overlap);
    if (ec != std::errc() || end != item.data() + item.size() || reserve.size == 0 || (percent && reserve.size >= 100) ||
        (last != nullptr && percent != spec.percent) || !stronger || spec.reserves.size() == kMaxPartitionLevels) {
      error = specError(text);
      return std::nullopt;
    }
    spec.percent = percent;
    spec.reserves.push_back(reserve);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return spec;
}

std::unique_ptr<SmPartitions> SmPartitions::create(CUdevice device, SmPartitionSpec spec, std::string& error) {
  std::unique_ptr<SmPartitions> p(new SmPartitions());
  CUdevResource all{};
  if (CUresult r = cuDeviceGetDevResource(device, &all, CU_DEV_RESOURCE_TYPE_SM); r != CUDA_SUCCESS) {
    error = driverError("cuDeviceGetDevResource", r);
    return nullptr;
  }
  p->allSms_ = all.sm.smCount;
  for (size_t i = 0; i < spec.levels(); ++i) {
    const bool overlap = spec.reserves[i].overlap;
    if (overlap && p->everySm_ == nullptr) {
      if (CUresult r = makeGreenContext(device, all, p->everySm_); r != CUDA_SUCCESS) {
        error = driverError("cuGreenCtxCreate (HP partition of every SM)", r);
        return nullptr;
      }
    }
    if (!p->addLevel(device, all, spec.hpSmsOf(all.sm.smCount, i), overlap, error)) return nullptr;
  }
  return p;
}

bool SmPartitions::addLevel(CUdevice device, CUdevResource& all, unsigned hpSms, bool overlap, std::string& error) {
  if (hpSms >= all.sm.smCount) {
    error = "HP partition of " + std::to_string(hpSms) + " SMs leaves none of the device's " +
            std::to_string(all.sm.smCount) + " for best-effort work";
    return false;
  }
  CUdevResource hp{}, rest{};
  unsigned groups = 1;
  if (CUresult r = cuDevSmResourceSplitByCount(&hp, &groups, &all, &rest, 0, hpSms); r != CUDA_SUCCESS) {
    error = driverError("cuDevSmResourceSplitByCount", r);
    return false;
  }
  if (rest.sm.smCount == 0) {
    error = "HP partition rounded up to " + std::to_string(hp.sm.smCount) + " SMs leaves none for best-effort work";
    return false;
  }
  Level& level = levels_.emplace_back();
  if (!overlap) {
    if (CUresult r = makeGreenContext(device, hp, level.hp); r != CUDA_SUCCESS) {
      error = driverError("cuGreenCtxCreate (HP partition)", r);
      return false;
    }
  }
  if (CUresult r = makeGreenContext(device, rest, level.be); r != CUDA_SUCCESS) {
    error = driverError("cuGreenCtxCreate (BE partition)", r);
    return false;
  }
  level.hpSms = overlap ? all.sm.smCount : hp.sm.smCount;
  level.beSms = rest.sm.smCount;
  return true;
}

SmPartitions::~SmPartitions() {
  for (Level& level : levels_) {
    if (level.hp != nullptr) cuGreenCtxDestroy(level.hp);
    if (level.be != nullptr) cuGreenCtxDestroy(level.be);
  }
  if (everySm_ != nullptr) cuGreenCtxDestroy(everySm_);
}

const SmPartitions::Level* SmPartitions::level(Placement p) const {
  return p.side == Placement::Side::kWholeGpu || p.level >= levels_.size() ? nullptr : &levels_[p.level];
}

CUresult SmPartitions::createStream(Placement p, int priority, CUstream& out) const {
  if (p.side == Placement::Side::kWholeGpu) return cuStreamCreateWithPriority(&out, CU_STREAM_NON_BLOCKING, priority);
  const Level* l = level(p);
  if (l == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUgreenCtx context = p.side == Placement::Side::kBe ? l->be : (l->hp != nullptr ? l->hp : everySm_);
  return cuGreenCtxStreamCreate(&out, context, CU_STREAM_NON_BLOCKING, priority);
}

unsigned SmPartitions::smCount(Placement p) const {
  if (p.side == Placement::Side::kWholeGpu) return allSms_;
  const Level* l = level(p);
  return l == nullptr ? 0 : p.side == Placement::Side::kHp ? l->hpSms : l->beSms;
}

}  // namespace tally::server::gpu
