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
#include <ctime>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace tally::client;

namespace {

using Uuid = std::array<unsigned char, 16>;
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
  Uuid id;
  const char* name;
  const Slot* (*table)();  // null: refused
};

// Names as the public projects that observed these requests use them.
constexpr ExportTable kExportTables[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     "runtime interface",
     runtimeInterface},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     "tools runtime hooks",
     toolCallbackHooks},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     "tools thread-local storage",
     toolThreadLocals},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     "context-local storage",
     contextLocalStorage},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     "context checks",
     contextChecks},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     "integrity check",
     integrityTable},
    {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     "library support",
     libraryTable},
    // Asked for before cuInit and optional: the runtime goes on without it.
    {{0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
     "runtime start-up",
     nullptr},
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

const ExportTable* findTable(const CUuuid& id) {
  for (const ExportTable& t : kExportTables) {
    if (std::memcmp(t.id.data(), id.bytes, 16) == 0) return &t;
  }
  return nullptr;
}

// True the first time `id` is asked for.
bool firstRequest(const CUuuid& id) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard lock(mutex);
  return seen.insert(uuidText(id)).second;
}

}  // namespace

TALLY_API CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *table = nullptr;
  const ExportTable* known = findTable(*id);
  if (known != nullptr && known->table != nullptr) {
    *table = known->table();
    return CUDA_SUCCESS;
  }
  if (firstRequest(*id)) {
    if (known != nullptr) {
      spdlog::debug("tally: cuGetExportTable({{{}}}, {}): not served (optional)", uuidText(*id), known->name);
    } else {
      spdlog::warn("tally: cuGetExportTable({{{}}}): an unknown driver table, not served", uuidText(*id));
    }
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}
