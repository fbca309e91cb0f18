// cuBLASLt with its descriptors kept in the client. PyTorch builds and destroys a matmul
// descriptor, three layouts and a preference for every GEMM (~21 calls); here those are local
// objects holding their creation arguments and the attributes set on them, which travel with the
// call that uses them (cublasLtMatmul one-way, cublasLtMatmulAlgoGetHeuristic a round trip whose
// answers are cached: they depend only on what is sent). A GEMM in steady state is therefore one
// one-way message. The layout on the wire is serializeDescriptor() below, read back by
// server/library/cublas_lt_exec.cc.
#include "client/api/api_util.h"
#include "client/library/library_call.h"
#include "client/runtime/client_runtime.h"
#include "client/transport/host_memory.h"

#include <cublasLt.h>

#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

using tally::client::ClientRuntime;
using namespace tally::client::library;
using tally::library::functionId;
using tally::library::ScalarPlace;

namespace {

constexpr Family kFamily = Family::kCublasLt;
constexpr uint32_t kDescriptorMagic = 0x7a11b1a5;

enum class LtKind : uint8_t { kMatmul = 1, kLayout = 2, kPreference = 3 };

struct LtDescriptor {
  uint32_t magic = kDescriptorMagic;
  LtKind kind;
  std::vector<int64_t> createArgs;
  std::map<uint32_t, std::string> attributes;  // as set, by attribute id
};

std::mutex& descriptorsMutex() {
  static auto* m = new std::mutex();
  return *m;
}
std::unordered_map<const void*, std::unique_ptr<LtDescriptor>>& descriptors() {
  static auto* d = new std::unordered_map<const void*, std::unique_ptr<LtDescriptor>>();
  return *d;
}

template <typename T>
cublasStatus_t createDescriptor(T* out, LtKind kind, std::vector<int64_t> args) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto d = std::make_unique<LtDescriptor>();
  d->kind = kind;
  d->createArgs = std::move(args);
  std::lock_guard<std::mutex> lock(descriptorsMutex());
  *out = reinterpret_cast<T>(d.get());
  descriptors().emplace(d.get(), std::move(d));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t destroyDescriptor(const void* p, LtKind kind) {
  std::lock_guard<std::mutex> lock(descriptorsMutex());
  auto it = descriptors().find(p);
  if (it == descriptors().end() || it->second->kind != kind) return CUBLAS_STATUS_INVALID_VALUE;
  descriptors().erase(it);
  return CUBLAS_STATUS_SUCCESS;
}

// A copy of the descriptor (callers then work without the lock); nullopt if not ours.
std::optional<LtDescriptor> snapshot(const void* p, LtKind kind) {
  std::lock_guard<std::mutex> lock(descriptorsMutex());
  auto it = descriptors().find(p);
  if (it == descriptors().end() || it->second->kind != kind) return std::nullopt;
  return *it->second;
}

cublasStatus_t setAttribute(const void* p, LtKind kind, uint32_t attr, const void* buf, size_t size) {
  if (buf == nullptr || size == 0 || size > 4096) return CUBLAS_STATUS_INVALID_VALUE;
  std::string bytes(size, '\0');
  if (!tally::client::host_memory::copyIn(bytes.data(), buf, size)) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(descriptorsMutex());
  auto it = descriptors().find(p);
  if (it == descriptors().end() || it->second->kind != kind) return CUBLAS_STATUS_INVALID_VALUE;
  it->second->attributes[attr] = std::move(bytes);
  return CUBLAS_STATUS_SUCCESS;
}

void serializeDescriptor(tally::library::ArgWriter& w, const LtDescriptor& d) {
  w.put(static_cast<uint8_t>(d.kind));
  w.put(static_cast<uint32_t>(d.createArgs.size()));
  for (int64_t a : d.createArgs) w.put(a);
  w.put(static_cast<uint32_t>(d.attributes.size()));
  for (const auto& [attr, bytes] : d.attributes) {
    w.put(attr);
    w.putBytes(bytes.data(), static_cast<uint32_t>(bytes.size()));
  }
}

// Appends the descriptor, or refuses the call when `p` is not one of ours of that kind.
bool putDescriptor(Call& c, const void* p, LtKind kind, std::optional<LtDescriptor>* keep = nullptr) {
  auto d = snapshot(p, kind);
  if (!d) {
    c.refuse();
    return false;
  }
  serializeDescriptor(c.args(), *d);
  if (keep != nullptr) *keep = std::move(d);
  return true;
}

// An attribute the application reads back: answered from what it set; only an attribute never
// set asks tallyd (its default).
cublasStatus_t getAttribute(const void* p, LtKind kind, uint32_t attr, void* buf, size_t size, size_t* written) {
  auto d = snapshot(p, kind);
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  auto it = d->attributes.find(attr);
  if (it != d->attributes.end()) {
    if (written != nullptr) *written = it->second.size();
    if (size == 0 && buf == nullptr) return CUBLAS_STATUS_SUCCESS;
    if (buf == nullptr || size < it->second.size()) return CUBLAS_STATUS_INVALID_VALUE;
    return tally::client::host_memory::copyOut(buf, it->second.data(), it->second.size()) ? CUBLAS_STATUS_SUCCESS
                                                                                           : CUBLAS_STATUS_INVALID_VALUE;
  }
  Call c(kFamily, "cublasLtDescriptorGetAttribute", functionId("cublasLtDescriptorGetAttribute"));
  serializeDescriptor(c.args(), *d);
  c.value(attr);
  c.value(static_cast<uint64_t>(size));
  int status = c.run(false);
  if (status != CUBLAS_STATUS_SUCCESS) return static_cast<cublasStatus_t>(status);
  const std::string& out = c.replyBytes();
  if (out.size() < sizeof(uint64_t)) return CUBLAS_STATUS_INTERNAL_ERROR;
  uint64_t n = 0;
  std::memcpy(&n, out.data(), sizeof n);
  if (written != nullptr) *written = n;
  size_t copied = out.size() - sizeof n;
  if (copied > 0 && (buf == nullptr || !tally::client::host_memory::copyOut(buf, out.data() + sizeof n, copied))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

int32_t pointerModeOf(const LtDescriptor& matmul) {
  auto it = matmul.attributes.find(CUBLASLT_MATMUL_DESC_POINTER_MODE);
  int32_t mode = CUBLASLT_POINTER_MODE_HOST;
  if (it != matmul.attributes.end() && it->second.size() >= sizeof mode) std::memcpy(&mode, it->second.data(), sizeof mode);
  return mode;
}

// alpha/beta as the matmul descriptor's pointer mode places them.
void putLtScalar(Call& c, const void* p, bool onDevice) {
  if (onDevice) {
    c.value(ScalarPlace::kDevice);
    c.device(p);
    return;
  }
  c.args().put(ScalarPlace::kHost);
  std::string bytes;
  for (size_t width : {size_t{16}, size_t{8}, size_t{4}, size_t{2}}) {
    bytes.resize(width);
    if (p != nullptr && tally::client::host_memory::copyIn(bytes.data(), p, width)) break;
    bytes.clear();
  }
  if (bytes.empty()) c.refuse();
  c.args().putBytes(bytes.data(), static_cast<uint32_t>(bytes.size()));
}

// Heuristic answers, by request bytes; bounded, oldest dropped first.
class HeuristicCache {
 public:
  std::optional<std::string> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  void add(const std::string& key, std::string value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!entries_.emplace(key, std::move(value)).second) return;
    order_.push_back(key);
    if (order_.size() > kCapacity) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  static constexpr size_t kCapacity = 4096;
  std::mutex mutex_;
  std::unordered_map<std::string, std::string> entries_;
  std::list<std::string> order_;
};

HeuristicCache& heuristicCache() {
  static auto* cache = new HeuristicCache();
  return *cache;
}

}  // namespace

TALLY_API cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t id = 0;
  int status = createHandle(kFamily, "cublasLtCreate", false, id);
  if (status == 0) *handle = reinterpret_cast<cublasLtHandle_t>(id);
  return static_cast<cublasStatus_t>(status);
}

TALLY_API cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return static_cast<cublasStatus_t>(destroyHandle(kFamily, "cublasLtDestroy", handle, CUBLAS_STATUS_NOT_INITIALIZED));
}

TALLY_API size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
TALLY_API size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }
TALLY_API cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}
TALLY_API const char* cublasLtGetStatusName(cublasStatus_t status) { return libraryStatusName(kFamily, status); }
TALLY_API const char* cublasLtGetStatusString(cublasStatus_t status) { return libraryStatusName(kFamily, status); }

// --- descriptors ------------------------------------------------------------------------------

TALLY_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                                  cudaDataType_t scaleType) {
  return createDescriptor(desc, LtKind::kMatmul, {computeType, scaleType});
}
TALLY_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroyDescriptor(desc, LtKind::kMatmul);
}
TALLY_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                                        const void* buf, size_t size) {
  return setAttribute(desc, LtKind::kMatmul, attr, buf, size);
}
TALLY_API cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                                        void* buf, size_t size, size_t* written) {
  return getAttribute(desc, LtKind::kMatmul, attr, buf, size, written);
}

TALLY_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                                    uint64_t cols, int64_t ld) {
  return createDescriptor(layout, LtKind::kLayout,
                          {type, static_cast<int64_t>(rows), static_cast<int64_t>(cols), ld});
}
TALLY_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroyDescriptor(layout, LtKind::kLayout);
}
TALLY_API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                          cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                          size_t size) {
  return setAttribute(layout, LtKind::kLayout, attr, buf, size);
}
TALLY_API cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                          cublasLtMatrixLayoutAttribute_t attr, void* buf, size_t size,
                                                          size_t* written) {
  return getAttribute(layout, LtKind::kLayout, attr, buf, size, written);
}

TALLY_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return createDescriptor(pref, LtKind::kPreference, {});
}
TALLY_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return destroyDescriptor(pref, LtKind::kPreference);
}
TALLY_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                              cublasLtMatmulPreferenceAttributes_t attr,
                                                              const void* buf, size_t size) {
  return setAttribute(pref, LtKind::kPreference, attr, buf, size);
}
TALLY_API cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                              cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                              size_t size, size_t* written) {
  return getAttribute(pref, LtKind::kPreference, attr, buf, size, written);
}

// --- work -------------------------------------------------------------------------------------

TALLY_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t operationDesc,
                                                        cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                        cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                        cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                                        cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                        int* returnAlgoCount) {
  if (requestedAlgoCount <= 0 || requestedAlgoCount > 1024 || heuristicResultsArray == nullptr ||
      returnAlgoCount == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Call c(kFamily, "cublasLtMatmulAlgoGetHeuristic", functionId("cublasLtMatmulAlgoGetHeuristic"));
  c.handle(handle);
  putDescriptor(c, operationDesc, LtKind::kMatmul);
  for (const void* layout : {Adesc, Bdesc, Cdesc, Ddesc}) putDescriptor(c, layout, LtKind::kLayout);
  putDescriptor(c, preference, LtKind::kPreference);
  c.value(static_cast<int32_t>(requestedAlgoCount));
  // The answer depends on the request and the device only (the handle adds nothing).
  std::string key = c.args().bytes().substr(sizeof(uint64_t)) + std::to_string(tally::client::currentDevice());
  std::optional<std::string> answer = heuristicCache().find(key);
  if (!answer) {
    int status = c.run(false);
    if (status != CUBLAS_STATUS_SUCCESS) return static_cast<cublasStatus_t>(status);
    answer = c.replyBytes();
    heuristicCache().add(key, *answer);
  }
  int32_t count = 0;
  if (answer->size() < sizeof count) return CUBLAS_STATUS_INTERNAL_ERROR;
  std::memcpy(&count, answer->data(), sizeof count);
  size_t bytes = static_cast<size_t>(count) * sizeof(cublasLtMatmulHeuristicResult_t);
  if (count < 0 || count > requestedAlgoCount || answer->size() != sizeof count + bytes) return CUBLAS_STATUS_INTERNAL_ERROR;
  if (!tally::client::host_memory::copyOut(heuristicResultsArray, answer->data() + sizeof count, bytes)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returnAlgoCount = count;
  return count > 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

TALLY_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                                        const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                        cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                        cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                        const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
                                        cudaStream_t stream) {
  Call c(kFamily, "cublasLtMatmul", functionId("cublasLtMatmul"));
  c.handle(handle);
  std::optional<LtDescriptor> matmul;
  if (!putDescriptor(c, computeDesc, LtKind::kMatmul, &matmul)) return CUBLAS_STATUS_INVALID_VALUE;
  int32_t mode = pointerModeOf(*matmul);
  putLtScalar(c, alpha, mode != CUBLASLT_POINTER_MODE_HOST);
  c.device(A);
  putDescriptor(c, Adesc, LtKind::kLayout);
  c.device(B);
  putDescriptor(c, Bdesc, LtKind::kLayout);
  // beta: on the host in HOST mode and in the "alpha device vector, beta host" mode; absent in
  // "beta zero" mode (cuBLASLt does not read it then).
  bool betaOnDevice = mode == CUBLASLT_POINTER_MODE_DEVICE || mode == CUBLASLT_POINTER_MODE_DEVICE_VECTOR;
  bool betaAbsent = mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
  c.value(static_cast<uint8_t>(betaAbsent ? 0 : 1));
  if (!betaAbsent) putLtScalar(c, beta, betaOnDevice);
  c.device(C);
  putDescriptor(c, Cdesc, LtKind::kLayout);
  c.device(D);
  putDescriptor(c, Ddesc, LtKind::kLayout);
  c.value(static_cast<uint8_t>(algo != nullptr));
  if (algo != nullptr) {
    cublasLtMatmulAlgo_t copy{};
    if (!tally::client::host_memory::copyIn(&copy, algo, sizeof copy)) c.refuse();
    c.value(copy);
  }
  c.device(workspace);
  c.value(static_cast<uint64_t>(workspaceSizeInBytes));
  c.stream(stream);
  return static_cast<cublasStatus_t>(c.run(true));
}
