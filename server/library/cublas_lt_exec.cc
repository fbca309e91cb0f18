// cuBLASLt: descriptors arrive by value with the call that uses them (client/library/cublas_lt.cc
// writes them: kind, creation arguments, attributes as set) and are built here for the call only.
// Device pointers hidden in matmul-descriptor attributes (bias, epilogue aux, scales, amax) are
// checked against the tenant's memory like every other address.
#include "server/library/library_call.h"
#include "server/session/tenant.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <optional>

namespace tally::server::library {
namespace {

enum class LtKind : uint8_t { kMatmul = 1, kLayout = 2, kPreference = 3 };

template <typename Fn>
Fn lt(const char* name) {
  return resolve<Fn>(Library::kCublasLt, name);
}

bool isPointerAttribute(uint32_t attr) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER: case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER:
      return true;
    default:
      return false;
  }
}

// A descriptor built for one call; destroyed with it.
struct LtDescriptor {
  LtKind kind{};
  void* object = nullptr;
  LtDescriptor() = default;
  LtDescriptor(const LtDescriptor&) = delete;
  ~LtDescriptor() {
    if (object == nullptr) return;
    switch (kind) {
      case LtKind::kMatmul: {
        static auto* fn = lt<decltype(&::cublasLtMatmulDescDestroy)>("cublasLtMatmulDescDestroy");
        if (fn != nullptr) fn(static_cast<cublasLtMatmulDesc_t>(object));
        break;
      }
      case LtKind::kLayout: {
        static auto* fn = lt<decltype(&::cublasLtMatrixLayoutDestroy)>("cublasLtMatrixLayoutDestroy");
        if (fn != nullptr) fn(static_cast<cublasLtMatrixLayout_t>(object));
        break;
      }
      case LtKind::kPreference: {
        static auto* fn = lt<decltype(&::cublasLtMatmulPreferenceDestroy)>("cublasLtMatmulPreferenceDestroy");
        if (fn != nullptr) fn(static_cast<cublasLtMatmulPreference_t>(object));
        break;
      }
    }
  }
};

cublasStatus_t createObject(LtKind kind, const std::vector<int64_t>& a, void*& out) {
  switch (kind) {
    case LtKind::kMatmul: {
      static auto* fn = lt<decltype(&::cublasLtMatmulDescCreate)>("cublasLtMatmulDescCreate");
      if (fn == nullptr || a.size() != 2) return CUBLAS_STATUS_NOT_INITIALIZED;
      return fn(reinterpret_cast<cublasLtMatmulDesc_t*>(&out), static_cast<cublasComputeType_t>(a[0]),
                static_cast<cudaDataType_t>(a[1]));
    }
    case LtKind::kLayout: {
      static auto* fn = lt<decltype(&::cublasLtMatrixLayoutCreate)>("cublasLtMatrixLayoutCreate");
      if (fn == nullptr || a.size() != 4) return CUBLAS_STATUS_NOT_INITIALIZED;
      return fn(reinterpret_cast<cublasLtMatrixLayout_t*>(&out), static_cast<cudaDataType>(a[0]),
                static_cast<uint64_t>(a[1]), static_cast<uint64_t>(a[2]), a[3]);
    }
    case LtKind::kPreference: {
      static auto* fn = lt<decltype(&::cublasLtMatmulPreferenceCreate)>("cublasLtMatmulPreferenceCreate");
      if (fn == nullptr || !a.empty()) return CUBLAS_STATUS_NOT_INITIALIZED;
      return fn(reinterpret_cast<cublasLtMatmulPreference_t*>(&out));
    }
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t setObjectAttribute(LtKind kind, void* object, uint32_t attr, const void* buf, size_t size) {
  switch (kind) {
    case LtKind::kMatmul: {
      static auto* fn = lt<decltype(&::cublasLtMatmulDescSetAttribute)>("cublasLtMatmulDescSetAttribute");
      return fn(static_cast<cublasLtMatmulDesc_t>(object), static_cast<cublasLtMatmulDescAttributes_t>(attr), buf, size);
    }
    case LtKind::kLayout: {
      static auto* fn = lt<decltype(&::cublasLtMatrixLayoutSetAttribute)>("cublasLtMatrixLayoutSetAttribute");
      return fn(static_cast<cublasLtMatrixLayout_t>(object), static_cast<cublasLtMatrixLayoutAttribute_t>(attr), buf,
                size);
    }
    case LtKind::kPreference: {
      static auto* fn = lt<decltype(&::cublasLtMatmulPreferenceSetAttribute)>("cublasLtMatmulPreferenceSetAttribute");
      return fn(static_cast<cublasLtMatmulPreference_t>(object),
                static_cast<cublasLtMatmulPreferenceAttributes_t>(attr), buf, size);
    }
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// Reads one descriptor and builds it; refuses the call when it is not of `expected` kind, names
// memory the tenant does not own, or the library rejects it.
std::unique_ptr<LtDescriptor> readDescriptor(LibraryCall& c, std::optional<LtKind> expected) {
  auto& in = c.reader();
  auto d = std::make_unique<LtDescriptor>();
  d->kind = static_cast<LtKind>(in.get<uint8_t>());
  std::vector<int64_t> args(std::min<uint32_t>(in.get<uint32_t>(), 8));
  for (int64_t& a : args) in.get(a);
  uint32_t count = in.get<uint32_t>();
  struct Attr {
    uint32_t id;
    const uint8_t* bytes;
    uint32_t size;
  };
  std::vector<Attr> attrs;
  for (uint32_t i = 0; i < count && !in.failed(); ++i) {
    Attr a{in.get<uint32_t>(), nullptr, 0};
    in.getBytes(a.bytes, a.size);
    attrs.push_back(a);
  }
  bool known = d->kind == LtKind::kMatmul || d->kind == LtKind::kLayout || d->kind == LtKind::kPreference;
  if (in.failed() || !known || (expected && d->kind != *expected)) {
    c.refuse("a cuBLASLt descriptor of the wrong kind");
    return d;
  }
  if (createObject(d->kind, args, d->object) != CUBLAS_STATUS_SUCCESS) {
    c.refuse("cuBLASLt rejected the descriptor's creation arguments");
    return d;
  }
  for (const Attr& a : attrs) {
    if (d->kind == LtKind::kMatmul && isPointerAttribute(a.id) && a.size == sizeof(uint64_t)) {
      uint64_t address = 0;
      std::memcpy(&address, a.bytes, sizeof address);
      c.ownedRange(address, 1, "matmul descriptor pointer");
    }
    if (setObjectAttribute(d->kind, d->object, a.id, a.bytes, a.size) != CUBLAS_STATUS_SUCCESS) {
      c.refuse(fmt::format("cuBLASLt rejected attribute {}", a.id));
    }
  }
  return d;
}

// cuBLAS documents that a cuBLAS handle may be used as a cuBLASLt handle (PyTorch does so).
cublasLtHandle_t ltHandle(LibraryCall& c) {
  uint64_t id = c.readId();
  for (uint32_t type : {kCublasLtHandleType, kCublasHandleType}) {
    if (session::LibraryObject* h = c.tenant().libraryObjects().find(id, type)) return static_cast<cublasLtHandle_t>(h->object);
  }
  c.refuse(fmt::format("handle {:#x} is not one of the tenant's", id));
  return nullptr;
}

int createReal(void** h) {
  static auto* fn = lt<decltype(&::cublasLtCreate)>("cublasLtCreate");
  return fn != nullptr ? fn(reinterpret_cast<cublasLtHandle_t*>(h)) : CUBLAS_STATUS_NOT_INITIALIZED;
}
void destroyReal(void* h) {
  static auto* fn = lt<decltype(&::cublasLtDestroy)>("cublasLtDestroy");
  if (fn != nullptr) fn(static_cast<cublasLtHandle_t>(h));
}
// cuBLASLt handles have no stream: each matmul names its own.
size_t version() {
  static auto* fn = lt<decltype(&::cublasLtGetVersion)>("cublasLtGetVersion");
  return fn != nullptr ? fn() : 0;
}
constexpr HandleOps kHandle{kCublasLtHandleType, &createReal, &destroyReal, nullptr, CUBLAS_STATUS_ALLOC_FAILED,
                            &version};

int create(LibraryCall& c) { return createHandle(c, kHandle); }
int destroy(LibraryCall& c) { return destroyHandle(c, kHandle); }

int heuristic(LibraryCall& c) {
  cublasLtHandle_t h = ltHandle(c);
  auto op = readDescriptor(c, LtKind::kMatmul);
  auto a = readDescriptor(c, LtKind::kLayout);
  auto b = readDescriptor(c, LtKind::kLayout);
  auto cc = readDescriptor(c, LtKind::kLayout);
  auto d = readDescriptor(c, LtKind::kLayout);
  auto pref = readDescriptor(c, LtKind::kPreference);
  int32_t requested = c.reader().get<int32_t>();
  if (requested <= 0 || requested > 1024) c.refuse("requested algorithm count out of range");
  if (c.refused()) return c.refusal();
  static auto* fn = lt<decltype(&::cublasLtMatmulAlgoGetHeuristic)>("cublasLtMatmulAlgoGetHeuristic");
  if (fn == nullptr) return c.missing();
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(requested));
  int returned = 0;
  cublasStatus_t st = fn(h, static_cast<cublasLtMatmulDesc_t>(op->object), static_cast<cublasLtMatrixLayout_t>(a->object),
                         static_cast<cublasLtMatrixLayout_t>(b->object), static_cast<cublasLtMatrixLayout_t>(cc->object),
                         static_cast<cublasLtMatrixLayout_t>(d->object),
                         static_cast<cublasLtMatmulPreference_t>(pref->object), requested, results.data(), &returned);
  // "No algorithm" is an answer too (NOT_SUPPORTED with a count of 0): the client caches it.
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) return st;
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) returned = 0;
  c.extraOutput().put(static_cast<int32_t>(returned));
  c.extraOutput().bytes().append(reinterpret_cast<const char*>(results.data()),
                                 static_cast<size_t>(returned) * sizeof(cublasLtMatmulHeuristicResult_t));
  return CUBLAS_STATUS_SUCCESS;
}

int matmul(LibraryCall& c) {
  cublasLtHandle_t h = ltHandle(c);
  auto op = readDescriptor(c, LtKind::kMatmul);
  const void* alpha = c.scalar();
  const void* A = c.device();
  auto aDesc = readDescriptor(c, LtKind::kLayout);
  const void* B = c.device();
  auto bDesc = readDescriptor(c, LtKind::kLayout);
  const void* beta = c.reader().get<uint8_t>() != 0 ? c.scalar() : nullptr;
  const void* C = c.device();
  auto cDesc = readDescriptor(c, LtKind::kLayout);
  void* D = c.device();
  auto dDesc = readDescriptor(c, LtKind::kLayout);
  cublasLtMatmulAlgo_t algo{};
  bool hasAlgo = c.reader().get<uint8_t>() != 0;
  if (hasAlgo) c.reader().get(algo);
  uint64_t workspaceAddress = c.readId();
  uint64_t workspaceSize = c.readId();
  void* workspace = c.ownedRange(workspaceAddress, workspaceSize, "workspace");
  CUstream stream = c.stream();
  if (c.refused()) return c.refusal();
  static auto* fn = lt<decltype(&::cublasLtMatmul)>("cublasLtMatmul");
  if (fn == nullptr) return c.missing();
  return fn(h, static_cast<cublasLtMatmulDesc_t>(op->object), alpha, A, static_cast<cublasLtMatrixLayout_t>(aDesc->object),
            B, static_cast<cublasLtMatrixLayout_t>(bDesc->object), beta, C,
            static_cast<cublasLtMatrixLayout_t>(cDesc->object), D, static_cast<cublasLtMatrixLayout_t>(dDesc->object),
            hasAlgo ? &algo : nullptr, workspace, workspaceSize, reinterpret_cast<cudaStream_t>(stream));
}

cublasStatus_t getObjectAttribute(LtKind kind, void* object, uint32_t attr, void* buf, size_t size, size_t* written) {
  switch (kind) {
    case LtKind::kMatmul: {
      static auto* fn = lt<decltype(&::cublasLtMatmulDescGetAttribute)>("cublasLtMatmulDescGetAttribute");
      return fn(static_cast<cublasLtMatmulDesc_t>(object), static_cast<cublasLtMatmulDescAttributes_t>(attr), buf, size,
                written);
    }
    case LtKind::kLayout: {
      static auto* fn = lt<decltype(&::cublasLtMatrixLayoutGetAttribute)>("cublasLtMatrixLayoutGetAttribute");
      return fn(static_cast<cublasLtMatrixLayout_t>(object), static_cast<cublasLtMatrixLayoutAttribute_t>(attr), buf,
                size, written);
    }
    case LtKind::kPreference: {
      static auto* fn = lt<decltype(&::cublasLtMatmulPreferenceGetAttribute)>("cublasLtMatmulPreferenceGetAttribute");
      return fn(static_cast<cublasLtMatmulPreference_t>(object),
                static_cast<cublasLtMatmulPreferenceAttributes_t>(attr), buf, size, written);
    }
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// An attribute the client never set: the library's default. Replies the size the library
// reports, then the bytes it wrote (none when asked for the size only).
int getAttribute(LibraryCall& c) {
  auto d = readDescriptor(c, std::nullopt);
  uint32_t attr = c.reader().get<uint32_t>();
  uint64_t size = c.readId();
  if (size > 4096) c.refuse("attribute buffer too large");
  if (c.refused()) return c.refusal();
  std::string buf(size, '\0');
  size_t written = 0;
  cublasStatus_t st = getObjectAttribute(d->kind, d->object, attr, size == 0 ? nullptr : buf.data(), size, &written);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  c.extraOutput().put(static_cast<uint64_t>(written));
  if (size != 0) c.extraOutput().bytes().append(buf.data(), std::min<size_t>(written, size));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

const std::vector<Executor>& cublasLtExecutors() {
  static const std::vector<Executor> table = {
      {functionId("cublasLtCreate"), "cublasLtCreate", &create},
      {functionId("cublasLtDestroy"), "cublasLtDestroy", &destroy},
      {functionId("cublasLtMatmulAlgoGetHeuristic"), "cublasLtMatmulAlgoGetHeuristic", &heuristic},
      {functionId("cublasLtMatmul"), "cublasLtMatmul", &matmul, true},
      {functionId("cublasLtDescriptorGetAttribute"), "cublasLtDescriptorGetAttribute", &getAttribute},
  };
  return table;
}

}  // namespace tally::server::library
