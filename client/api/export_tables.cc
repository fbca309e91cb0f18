// cuGetExportTable: the driver's private tables, looked up by UUID, through which a CUDA runtime
// linked into the program itself (static cudart: nvcc's default, CuPy, JAX's CUDA plugin) and some
// NVIDIA libraries reach the driver instead of the documented API. Their layouts and semantics are
// undocumented, and the runtime checks the driver's validity through them, so the client serves
// none: every request is refused with NotSupported, and the first request for each table is
// logged by name with what to do instead. The lookup itself is reported found by cuGetProcAddress,
// so such a runtime fails with cudaErrorNotSupported rather than claiming the driver is too old.
#include "client/api/api_util.h"

#include <array>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

namespace {

struct KnownTable {
  std::array<unsigned char, 16> id;
  const char* name;
};

// Names as the public projects that observed these requests use them.
constexpr KnownTable kKnownTables[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, "cudart interface"},
    {{0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9}, "runtime start-up"},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}, "tools runtime hooks"},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, "tools thread-local storage"},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, "context-local storage"},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}, "context checks"},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}, "integrity check"},
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

const char* tableName(const CUuuid& id) {
  for (const KnownTable& t : kKnownTables) {
    if (std::memcmp(t.id.data(), id.bytes, 16) == 0) return t.name;
  }
  return "unknown";
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
  if (firstRequest(*id)) {
    spdlog::warn(
        "tally: cuGetExportTable({{{}}}, {}): the driver's private tables are not served; a program that "
        "carries its own CUDA runtime (linked statically) cannot start through Tally — build it with "
        "-cudart shared (libraries that only probe this table go on)",
        uuidText(*id), tableName(*id));
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}
