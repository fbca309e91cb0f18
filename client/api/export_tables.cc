// cuGetExportTable: the driver's private tables, looked up by UUID. A CUDA runtime linked into the
// program itself (static cudart: nvcc's default, CuPy, JAX's CUDA plugin) starts only when the
// driver serves the ones it asks for. Their layouts are undocumented; what is served here follows
// what public re-implementations of the driver observed (ZLUDA, Lupine) and what the CUDA 13.0
// static runtime was seen to call against a fake driver:
//   - the runtime interface: module loads from its embedded images, a device's primary context;
//   - tool hooks and tool thread-local slots: the runtime asks for them, finds no tool attached;
//   - context-local storage: the runtime keeps its per-context state in the driver
//     (client/api/context_storage.cc);
//   - context checks: "nothing unusual about this context";
//   - the integrity check: an HMAC-MD2 over the process, the thread, the tables' addresses and
//     the devices as this library reports them, which the runtime recomputes and compares;
//   - a table of NVIDIA's libraries (cuFFT), of which only three slots are known.
// Each table's first word is its size in bytes (context-local storage has none and ends with a
// null slot). Other tables are refused with NotSupported, logged once by name.
#include "client/api/api_util.h"
#include "client/api/context_storage.h"
#include "common/hash/md2.h"

#include <pthread.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace tally::client;

namespace {

using Slot = const void*;

template <typename Fn>
Slot slot(Fn* fn) {
  return reinterpret_cast<Slot>(fn);
}
constexpr Slot sizeWord(size_t slots) { return reinterpret_cast<Slot>(slots * sizeof(Slot)); }

// Slots whose purpose is unknown and whose callers were never seen to use them: a call returns
// 0 whatever it passes (the System V ABI lets a function ignore its arguments).
uintptr_t unknownSlot() { return 0; }

// ---- the runtime interface ----------------------------------------------------------------------

CUresult moduleFromImage(CUmodule* module, const void* image) { return cuModuleLoadData(module, image); }

// Variants with three more arguments, seen only as zeros; anything else is refused, not guessed.
CUresult moduleFromImageWithOptions(CUmodule* module, const void* image, void* a, void* b, unsigned c) {
  if (a != nullptr || b != nullptr || c != 0) {
    spdlog::warn("tally: the CUDA runtime loaded a module with unknown options ({}, {}, {}): not supported", a, b, c);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return cuModuleLoadData(module, image);
}

CUresult moduleFromFatbinWithOptions(const void* fatbin, CUmodule* module, void* a, void* b, unsigned c) {
  return moduleFromImageWithOptions(module, fatbin, a, b, c);
}

// The device's primary context. Natively this takes no reference (the runtime retains it itself
// later); the client's primary contexts are not reference-counted, so retaining is the same.
CUresult primaryContext(CUcontext* ctx, CUdevice device) { return cuDevicePrimaryCtxRetain(ctx, device); }

void noteRuntimeValue(size_t) {}

// Natively loads the PTX compiler; tallyd compiles, so there is nothing to load here.
CUresult loadCompilers() { return CUDA_SUCCESS; }

const Slot* runtimeInterface() {
  static const Slot table[] = {sizeWord(13),
                               slot(moduleFromImage),
                               slot(primaryContext),
                               nullptr,
                               nullptr,
                               nullptr,
                               slot(moduleFromImageWithOptions),
                               slot(noteRuntimeValue),
                               slot(moduleFromFatbinWithOptions),
                               nullptr,
                               nullptr,
                               nullptr,
                               slot(loadCompilers)};
  return table;
}

// ---- tools --------------------------------------------------------------------------------------

// Where a tool would subscribe to the runtime's callbacks: zeros, no tool. Larger than reported.
template <size_t kReported>
void toolBuffer(void** buffer, size_t* size) {
  alignas(64) static uint32_t storage[kReported] = {};
  if (buffer != nullptr) *buffer = storage;
  if (size != nullptr) *size = kReported;
}

const Slot* toolCallbackHooks() {
  static const Slot table[] = {sizeWord(7),           slot(unknownSlot), slot(toolBuffer<1024>), slot(unknownSlot),
                               slot(unknownSlot), slot(unknownSlot), slot(toolBuffer<14>)};
  return table;
}

const Slot* toolThreadLocals() {
  static const Slot table[] = {sizeWord(4), slot(unknownSlot), slot(unknownSlot), slot(unknownSlot)};
  return table;
}

// ---- context-local storage and checks -----------------------------------------------------------

const Slot* contextLocalStorage() {
  static const Slot table[] = {slot(context_storage::put), slot(context_storage::remove), slot(context_storage::get),
                               nullptr};
  return table;
}

CUresult contextCheckUnknown(CUcontext, unsigned*, const void**) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult contextCheck(CUcontext, unsigned* result, const void**) {
  if (result != nullptr) *result = 0;
  return CUDA_SUCCESS;
}
unsigned contextCheckFlags() { return 0; }

const Slot* contextChecks() {
  static const Slot table[] = {sizeWord(4), slot(contextCheckUnknown), slot(contextCheck), slot(contextCheckFlags)};
  return table;
}

// ---- the integrity check ------------------------------------------------------------------------

const Slot* integrityTable();

// The key and the two fixed answers are the runtime's own constants.
constexpr std::array<uint8_t, 16> kIntegrityKey = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                                   0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

// Hashed as laid out here: 48 bytes, then 28 per device (no padding in either).
struct IntegrityHeader {
  uint32_t driverVersion;
  uint32_t version;
  uint32_t pid;
  uint32_t thread;
  uint64_t runtimeTable;
  uint64_t integrityTable;
  uint64_t checkFunction;
  uint64_t unixSeconds;
};

struct IntegrityDevice {
  CUuuid uuid;
  int32_t pciDomain;
  int32_t pciBus;
  int32_t pciDevice;
};
static_assert(sizeof(IntegrityHeader) == 48 && sizeof(IntegrityDevice) == 28);

// The runtime asks three times with version + 0, 1, 2; only the last answer depends on anything.
// It hashes what this library tells it (driver version, devices), so this hashes the same.
CUresult integrityCheck(unsigned version, unsigned long long unixSeconds, unsigned long long result[2]) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (version % 10 < 2) {
    result[0] = version % 10 == 0 ? 0x3341181c03cb675cULL : 0x1841181c03cb675cULL;
    result[1] = 0x8ed383aa1f4cd1e8ULL;
    return CUDA_SUCCESS;
  }
  int driverVersion = 0, devices = 0;
  if (CUresult r = cuDriverGetVersion(&driverVersion); r != CUDA_SUCCESS) return r;
  if (CUresult r = cuDeviceGetCount(&devices); r != CUDA_SUCCESS) return r;
  IntegrityHeader header{static_cast<uint32_t>(driverVersion),
                         version,
                         static_cast<uint32_t>(::getpid()),
                         static_cast<uint32_t>(pthread_self()),  // its low 32 bits
                         reinterpret_cast<uint64_t>(runtimeInterface()),
                         reinterpret_cast<uint64_t>(integrityTable()),
                         reinterpret_cast<uint64_t>(integrityTable()[1]),
                         unixSeconds};
  std::vector<IntegrityDevice> perDevice(static_cast<size_t>(devices));
  for (int d = 0; d < devices; ++d) {
    IntegrityDevice& info = perDevice[static_cast<size_t>(d)];
    if (CUresult r = cuDeviceGetUuid_v2(&info.uuid, d); r != CUDA_SUCCESS) return r;
    cuDeviceGetAttribute(&info.pciDomain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
    cuDeviceGetAttribute(&info.pciBus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
    cuDeviceGetAttribute(&info.pciDevice, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
  }
  tally::hash::Md2Digest digest = tally::hash::hmacMd2(
      kIntegrityKey, {{&header, sizeof(header)}, {perDevice.data(), perDevice.size() * sizeof(IntegrityDevice)}});
  std::memcpy(result, digest.data(), digest.size());
  return CUDA_SUCCESS;
}

const Slot* integrityTable() {
  static const Slot table[] = {sizeWord(3), slot(integrityCheck), nullptr};
  return table;
}

// ---- a table NVIDIA's libraries ask for (cuFFT running in the application) ----------------------
// Only three slots are known, from what public re-implementations observed (Lupine); every other
// slot logs its index and arguments once and answers NotSupported, so a library that needs more
// says exactly what.

// Whether `ctx` names a context (1) or not (0).
CUresult contextPresent(CUcontext ctx, unsigned long long* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = ctx != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult zeroAnswer(void*, void* query, unsigned long long* out) {
  if (query == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = 0;
  return CUDA_SUCCESS;
}

// An opaque object the library only passes back: zeros, larger than it was seen to read.
CUresult emptyObject(void*, uintptr_t handle, const void** out) {
  alignas(64) static const uint64_t object[64] = {};
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (handle == UINTPTR_MAX) return CUDA_ERROR_INVALID_HANDLE;
  *out = object;
  return CUDA_SUCCESS;
}

template <size_t kSlot>
CUresult unexploredSlot(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3) {
  static std::once_flag once;
  std::call_once(once, [&] {
    spdlog::warn("tally: slot {} of the driver's library table {{21318c60}} was called ({:#x}, {:#x}, {:#x}, {:#x}): "
                 "not supported", kSlot, a0, a1, a2, a3);
  });
  return CUDA_ERROR_NOT_SUPPORTED;
}

constexpr size_t kLibraryTableSlots = 100;

template <size_t... kSlots>
std::array<Slot, kLibraryTableSlots> libraryTableWith(std::index_sequence<kSlots...>) {
  std::array<Slot, kLibraryTableSlots> table = {slot(unexploredSlot<kSlots>)...};
  table[0] = sizeWord(kLibraryTableSlots);
  table[4] = slot(contextPresent);
  table[39] = slot(zeroAnswer);
  table[51] = slot(emptyObject);
  return table;
}

const Slot* libraryTable() {
  static const std::array<Slot, kLibraryTableSlots> table =
      libraryTableWith(std::make_index_sequence<kLibraryTableSlots>());
  return table.data();
}

// ---- lookup -------------------------------------------------------------------------------------

struct ExportTable {
  const char* id;  // as uuidText() writes it
  const char* name;
  const Slot* (*table)();  // null: refused
};

// Names as the public projects that observed these requests use them.
constexpr ExportTable kExportTables[] = {
    {"6bd5fb6c-5bf4-e74a-8987-d93912fd9df9", "runtime interface", runtimeInterface},
    {"a094798c-2e74-2e74-93f2-0800200c0a66", "tools runtime hooks", toolCallbackHooks},
    {"42d85a81-23f6-cb47-8298-f6e78a3aecdc", "tools thread-local storage", toolThreadLocals},
    {"c693336e-1121-df11-a8c3-68f355d89593", "context-local storage", contextLocalStorage},
    {"263e8860-7cd2-6143-92f6-bbd5006dfa7e", "context checks", contextChecks},
    {"d4082055-bde6-704b-8d34-ba123c66e1f2", "integrity check", integrityTable},
    {"21318c60-9714-3248-8ca6-41ff7324c8f2", "library support", libraryTable},
    // Asked for before cuInit and optional: the runtime goes on without it.
    {"f8cff951-2146-8b4e-b9e2-fb469e7c0dd9", "runtime start-up", nullptr},
};

std::string uuidText(const CUuuid& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    auto byte = static_cast<unsigned char>(id.bytes[i]);
    text += kHex[byte >> 4];
    text += kHex[byte & 0xf];
  }
  return text;
}

const ExportTable* findTable(const std::string& id) {
  for (const ExportTable& t : kExportTables) {
    if (id == t.id) return &t;
  }
  return nullptr;
}

// True the first time `id` is asked for.
bool firstRequest(const std::string& id) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard lock(mutex);
  return seen.insert(id).second;
}

}  // namespace

TALLY_API CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *table = nullptr;
  const std::string name = uuidText(*id);
  const ExportTable* known = findTable(name);
  if (known != nullptr && known->table != nullptr) {
    *table = known->table();
    return CUDA_SUCCESS;
  }
  if (firstRequest(name)) {
    if (known != nullptr) {
      spdlog::debug("tally: cuGetExportTable({{{}}}, {}): not served (optional)", name, known->name);
    } else {
      spdlog::warn("tally: cuGetExportTable({{{}}}): an unknown driver table, not served", name);
    }
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}
