// Driver JIT linking (cuLinkCreate … cuLinkDestroy). The client has no driver: the link state
// lives in tallyd under an id the client chose, and every input travels there. What stays here
// is what the application's memory holds: its log buffers (tallyd sends the text of its own
// buffers of the same sizes back, and the client copies it in, the error log also on failure),
// the option slots the driver would overwrite (wall time, log sizes), and the linked image,
// owned by the link until cuLinkDestroy as natively.
#include "client/api/api_util.h"
#include "common/jit/jit_options.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

constexpr size_t kMaxLinkInputBytes = 64u << 20;  // tallyd's default bulk limit per frame
constexpr unsigned kMaxLogBytes = 1u << 20;       // tallyd's limit per log buffer

// The application's options, split into what tallyd is told (numbers) and what only the
// client can fill (buffers and output slots in the application's memory).
struct JitOptions {
  std::vector<std::pair<uint32_t, uint64_t>> values;
  char* infoLog = nullptr;
  void** infoLogBytes = nullptr;   // IN: buffer size, OUT: bytes filled
  char* errorLog = nullptr;
  void** errorLogBytes = nullptr;
  void** wallTime = nullptr;       // OUT: milliseconds, a float in the slot itself
  // The buffers' sizes as given (the IN values): the slots above are overwritten with the bytes
  // filled after each call, so they cannot say how large the buffers are any more.
  unsigned infoLogCapacity = 0;
  unsigned errorLogCapacity = 0;

  bool hasOutputs() const { return infoLog || infoLogBytes || errorLog || errorLogBytes || wallTime; }
  static unsigned logSize(void** slot) {
    return slot != nullptr ? static_cast<unsigned>(reinterpret_cast<uintptr_t>(*slot)) : 0;
  }
};

const char* optionName(CUjit_option option) {
  switch (option) {
    case CU_JIT_INFO_LOG_BUFFER: return "CU_JIT_INFO_LOG_BUFFER (per input)";
    case CU_JIT_GLOBAL_SYMBOL_NAMES: return "CU_JIT_GLOBAL_SYMBOL_NAMES";
    case CU_JIT_GLOBAL_SYMBOL_ADDRESSES: return "CU_JIT_GLOBAL_SYMBOL_ADDRESSES";
    case CU_JIT_GLOBAL_SYMBOL_COUNT: return "CU_JIT_GLOBAL_SYMBOL_COUNT";
    case CU_JIT_REFERENCED_KERNEL_NAMES: return "CU_JIT_REFERENCED_KERNEL_NAMES";
    case CU_JIT_REFERENCED_KERNEL_COUNT: return "CU_JIT_REFERENCED_KERNEL_COUNT";
    case CU_JIT_REFERENCED_VARIABLE_NAMES: return "CU_JIT_REFERENCED_VARIABLE_NAMES";
    case CU_JIT_REFERENCED_VARIABLE_COUNT: return "CU_JIT_REFERENCED_VARIABLE_COUNT";
    default: return "CU_JIT option";
  }
}

// Options that name memory tallyd cannot reach (symbol tables, referenced-name lists) or are
// gone from the driver: refused, each logged once.
CUresult refuseOption(CUjit_option option) {
  static std::mutex mutex;
  static std::set<int> logged;
  std::lock_guard lock(mutex);
  if (logged.insert(option).second) {
    spdlog::warn("tally: {} ({}) is not supported: it names application memory or is obsolete", optionName(option),
                 static_cast<int>(option));
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// The one parser of JIT option arrays (cuLinkCreate, cuLinkAddData, cuLinkAddFile).
CUresult parseJitOptions(unsigned count, CUjit_option* options, void** values, JitOptions& out) {
  if (count == 0) return CUDA_SUCCESS;
  if (options == nullptr || values == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    switch (options[i]) {
      case CU_JIT_INFO_LOG_BUFFER: out.infoLog = static_cast<char*>(values[i]); break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: out.infoLogBytes = &values[i]; break;
      case CU_JIT_ERROR_LOG_BUFFER: out.errorLog = static_cast<char*>(values[i]); break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: out.errorLogBytes = &values[i]; break;
      case CU_JIT_WALL_TIME: out.wallTime = &values[i]; break;
      default:
        if (!tally::jit::isValueOption(options[i])) return refuseOption(options[i]);
        out.values.emplace_back(options[i], reinterpret_cast<uintptr_t>(values[i]));
    }
  }
  out.infoLogCapacity = JitOptions::logSize(out.infoLogBytes);
  out.errorLogCapacity = JitOptions::logSize(out.errorLogBytes);
  // A size without its buffer would have the driver write through a null pointer.
  if ((out.infoLogCapacity > 0 && out.infoLog == nullptr) || (out.errorLogCapacity > 0 && out.errorLog == nullptr) ||
      out.infoLogCapacity > kMaxLogBytes || out.errorLogCapacity > kMaxLogBytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

void setOptions(capnp::List<wire::JitOption>::Builder list, const JitOptions& options) {
  for (unsigned i = 0; i < options.values.size(); ++i) {
    list[i].setOption(options.values[i].first);
    list[i].setValue(options.values[i].second);
  }
}

struct LinkHandle {
  HandleMagic magic = HandleMagic::kLink;
  uint64_t id = 0;
  JitOptions outputs;   // the cuLinkCreate options the driver writes back to
  std::string image;    // the linked cubin, valid until cuLinkDestroy
};

LinkHandle* asLink(CUlinkState state) { return checkedHandle<LinkHandle>(state, HandleMagic::kLink); }

// Copies tallyd's log text — its whole buffer, as the driver left it — into the application's
// buffer of `capacity` bytes (NUL-terminated, truncated to fit), and the bytes filled into the
// size slot once there is text. The capacity is the one cuLinkCreate was given, never the slot:
// the driver links later than it is created, so the first reply (cuLinkCreate's) has no text
// yet, and a slot set to 0 then left every later log uncopied.
void copyLog(const capnp::Text::Reader text, char* buffer, unsigned capacity, void** sizeSlot) {
  if (buffer == nullptr || capacity == 0) return;
  size_t filled = std::min<size_t>(text.size(), capacity - 1);
  std::memcpy(buffer, text.begin(), filled);
  buffer[filled] = '\0';
  if (filled > 0 && sizeSlot != nullptr) *sizeSlot = reinterpret_cast<void*>(static_cast<uintptr_t>(filled + 1));
}

void writeOutputs(const JitOptions& outputs, ReplyMessage& reply) {
  if (!reply.reply().isLink()) return;
  auto result = reply.reply().getLink();
  copyLog(result.getInfoLog(), outputs.infoLog, outputs.infoLogCapacity, outputs.infoLogBytes);
  copyLog(result.getErrorLog(), outputs.errorLog, outputs.errorLogCapacity, outputs.errorLogBytes);
  if (outputs.wallTime != nullptr) {
    float ms = result.getWallTimeMs();
    *outputs.wallTime = nullptr;
    std::memcpy(outputs.wallTime, &ms, sizeof ms);
  }
}

CUresult createLink(unsigned count, CUjit_option* options, void** values, CUlinkState* stateOut) {
  if (stateOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto link = std::make_unique<LinkHandle>();
  if (CUresult r = parseJitOptions(count, options, values, link->outputs); r != CUDA_SUCCESS) return r;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  link->id = rt().newHandleId();
  const JitOptions& o = link->outputs;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto create = c.initLinkCreate();
    create.setDevice(currentDevice());
    create.setLink(link->id);
    setOptions(create.initOptions(static_cast<unsigned>(o.values.size())), o);
    create.setInfoLogBytes(o.infoLog != nullptr ? o.infoLogCapacity : 0);
    create.setErrorLogBytes(o.errorLog != nullptr ? o.errorLogCapacity : 0);
    create.setWallTime(o.wallTime != nullptr);
  }, &reply);
  writeOutputs(o, reply);
  if (r != CUDA_SUCCESS) return r;
  registerHandle(link.get());
  *stateOut = reinterpret_cast<CUlinkState>(link.release());
  return CUDA_SUCCESS;
}

// cuLinkAddData and cuLinkAddFile: the input's bytes go to tallyd's link as bulk.
CUresult addLinkInput(CUlinkState state, CUjitInputType type, const void* data, size_t size, const char* name,
                      unsigned count, CUjit_option* options, void** values) {
  LinkHandle* link = asLink(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (data == nullptr || size == 0 || size > kMaxLinkInputBytes || type < 0 || type >= CU_JIT_NUM_INPUT_TYPES) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  JitOptions input;
  if (CUresult r = parseJitOptions(count, options, values, input); r != CUDA_SUCCESS) return r;
  if (input.hasOutputs()) return refuseOption(CU_JIT_INFO_LOG_BUFFER);  // per-input logs: not forwarded
  iovec bytes{const_cast<void*>(data), size};
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto add = c.initLinkAddData();
    add.setLink(link->id);
    add.setInputType(type);
    add.setName(name != nullptr ? name : "");
    add.setSize(size);
    setOptions(add.initOptions(static_cast<unsigned>(input.values.size())), input);
  }, &reply, std::span<const iovec>(&bytes, 1));
  writeOutputs(link->outputs, reply);
  return r;
}

// The application's file system, not tallyd's (as cuModuleLoad): read here, sent as data.
CUresult addLinkFile(CUlinkState state, CUjitInputType type, const char* path, unsigned count, CUjit_option* options,
                     void** values) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (asLink(state) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return CUDA_ERROR_INVALID_IMAGE;
  if (type == CU_JIT_INPUT_PTX) bytes.push_back('\0');  // PTX is text: the driver reads to its NUL
  return addLinkInput(state, type, bytes.data(), bytes.size(), path, count, options, values);
}

CUresult completeLink(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  LinkHandle* link = asLink(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (cubinOut == nullptr || sizeOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initLinkComplete().setLink(link->id); }, &reply);
  writeOutputs(link->outputs, reply);
  if (r != CUDA_SUCCESS) return r;
  if (!reply.reply().isLink()) return CUDA_ERROR_UNKNOWN;
  auto image = reply.reply().getLink().getImage();
  link->image.assign(reinterpret_cast<const char*>(image.begin()), image.size());
  *cubinOut = link->image.data();
  *sizeOut = link->image.size();
  return CUDA_SUCCESS;
}

CUresult destroyLink(CUlinkState state) {
  LinkHandle* link = asLink(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = rt().post([&](wire::Call::Builder c) { c.initLinkDestroy().setLink(link->id); });
  handleRegistry().remove(link);
  delete link;
  return r;
}

}  // namespace

TALLY_API CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                   CUlinkState* stateOut) {
  return guardDriver(__func__, [&] { return createLink(numOptions, options, optionValues, stateOut); });
}

TALLY_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                    unsigned int numOptions, CUjit_option* options, void** optionValues) {
  return guardDriver(__func__, [&] {
    return addLinkInput(state, type, data, size, name, numOptions, options, optionValues);
  });
}

TALLY_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  return guardDriver(__func__, [&] { return addLinkFile(state, type, path, numOptions, options, optionValues); });
}

TALLY_API CUresult cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  return guardDriver(__func__, [&] { return completeLink(state, cubinOut, sizeOut); });
}

TALLY_API CUresult cuLinkDestroy(CUlinkState state) {
  return guardDriver(__func__, [&] { return destroyLink(state); });
}

// --- the exports older headers bind to (cuda.h renames these names to their newest version) ---
#undef cuLinkCreate
#undef cuLinkAddData
#undef cuLinkAddFile

TALLY_API CUresult cuLinkCreate(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                CUlinkState* stateOut) {
  return cuLinkCreate_v2(numOptions, options, optionValues, stateOut);
}

TALLY_API CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                 unsigned int numOptions, CUjit_option* options, void** optionValues) {
  return cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues);
}

TALLY_API CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char* path, unsigned int numOptions,
                                 CUjit_option* options, void** optionValues) {
  return cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues);
}
