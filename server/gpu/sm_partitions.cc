#include "server/gpu/sm_partitions.h"

#include <charconv>

namespace tally::server::gpu {

std::optional<SmPartitionSpec> parseSmPartitionSpec(std::string_view text, std::string& error) {
  if (text.empty() || text == "off") return std::nullopt;
  SmPartitionSpec spec;
  std::string_view count = text;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    if (text.substr(colon + 1) != "overlap") {
      error = "SM partition '" + std::string(text) + "': the only option after ':' is 'overlap'";
      return std::nullopt;
    }
    spec.overlap = true;
    count = text.substr(0, colon);
  }
  const bool percent = !count.empty() && count.back() == '%';
  if (percent) count.remove_suffix(1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), value);
  if (ec != std::errc() || end != count.data() + count.size() || value == 0 || (percent && value >= 100)) {
    error = "SM partition '" + std::string(text) +
            "': expected off, N or P% with an optional :overlap (N > 0 SMs for HP, or 1-99 % of them)";
    return std::nullopt;
  }
  (percent ? spec.hpPercent : spec.hpSms) = value;
  return spec;
}

namespace {

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

std::unique_ptr<SmPartitions> SmPartitions::create(CUdevice device, SmPartitionSpec spec, std::string& error) {
  std::unique_ptr<SmPartitions> p(new SmPartitions());
  CUdevResource all{};
  if (CUresult r = cuDeviceGetDevResource(device, &all, CU_DEV_RESOURCE_TYPE_SM); r != CUDA_SUCCESS) {
    error = driverError("cuDeviceGetDevResource", r);
    return nullptr;
  }
  p->allSms_ = all.sm.smCount;
  const unsigned hpSms = spec.hpSmsOf(all.sm.smCount);
  if (hpSms >= all.sm.smCount) {
    error = "HP partition of " + std::to_string(hpSms) + " SMs leaves none of the device's " +
            std::to_string(all.sm.smCount) + " for best-effort work";
    return nullptr;
  }
  CUdevResource hp{}, rest{};
  unsigned groups = 1;
  if (CUresult r = cuDevSmResourceSplitByCount(&hp, &groups, &all, &rest, 0, hpSms); r != CUDA_SUCCESS) {
    error = driverError("cuDevSmResourceSplitByCount", r);
    return nullptr;
  }
  if (rest.sm.smCount == 0) {
    error = "HP partition rounded up to " + std::to_string(hp.sm.smCount) + " SMs leaves none for best-effort work";
    return nullptr;
  }
  CUdevResource& hpResource = spec.overlap ? all : hp;
  if (CUresult r = makeGreenContext(device, hpResource, p->hp_); r != CUDA_SUCCESS) {
    error = driverError("cuGreenCtxCreate (HP partition)", r);
    return nullptr;
  }
  if (CUresult r = makeGreenContext(device, rest, p->be_); r != CUDA_SUCCESS) {
    error = driverError("cuGreenCtxCreate (BE partition)", r);
    return nullptr;
  }
  p->hpSms_ = hpResource.sm.smCount;
  p->beSms_ = rest.sm.smCount;
  return p;
}

SmPartitions::~SmPartitions() {
  if (hp_ != nullptr) cuGreenCtxDestroy(hp_);
  if (be_ != nullptr) cuGreenCtxDestroy(be_);
}

CUresult SmPartitions::createStream(Placement p, int priority, CUstream& out) const {
  switch (p) {
    case Placement::kWholeGpu:
      return cuStreamCreateWithPriority(&out, CU_STREAM_NON_BLOCKING, priority);
    case Placement::kHpPartition:
      return cuGreenCtxStreamCreate(&out, hp_, CU_STREAM_NON_BLOCKING, priority);
    case Placement::kBePartition:
      return cuGreenCtxStreamCreate(&out, be_, CU_STREAM_NON_BLOCKING, priority);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

unsigned SmPartitions::smCount(Placement p) const {
  switch (p) {
    case Placement::kWholeGpu:
      return allSms_;
    case Placement::kHpPartition:
      return hpSms_;
    case Placement::kBePartition:
      return beSms_;
  }
  return 0;
}

}  // namespace tally::server::gpu
