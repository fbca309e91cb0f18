#include "client/runtime/client_runtime.h"

#include "client/entry/per_thread_stream.h"
#include "client/runtime/host_callback_words.h"
#include "client/runtime/shared_memfd.h"
#include "client/runtime/staging_ring.h"

#include "common/fatbin/fatbin.h"
#include "common/hash/content_hash.h"
#include "common/log/log.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <condition_variable>
#include <deque>
#include <thread>

namespace tally::client {

namespace {

std::string envOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::string defaultTenantName() {
  char exe[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string path = n > 0 ? std::string(exe, static_cast<size_t>(n)) : "app";
  return path.substr(path.find_last_of('/') + 1) + "-" + std::to_string(::getpid());
}

// Host callbacks run here, in order, never on the receiver thread (a slow callback must not
// hold up replies).
class CallbackThread {
 public:
  void push(std::function<void()> work) {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    queue_.push_back(std::move(work));
    wake_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return !queue_.empty(); });
      auto work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  std::thread thread_;
};

CallbackThread& callbackThread() {
  static auto* thread = new CallbackThread();  // never destroyed: callbacks may run at exit
  return *thread;
}

}  // namespace

ClientRuntime& ClientRuntime::get() {
  static ClientRuntime* runtime = [] {
    log::setup("tally-client", "", spdlog::level::warn);
    return new ClientRuntime();  // never destroyed: app threads may call CUDA during exit
  }();
  return *runtime;
}

ClientRuntime::ClientRuntime() = default;
ClientRuntime::~ClientRuntime() = default;

// --- connection ------------------------------------------------------------------------

void ClientRuntime::connect() {
  std::string error;
  // Off only to compare (bench/run_micro.sh): calls then always wait for their reply.
  completionWordsOff_ = std::string_view(envOr("TALLY_COMPLETION_WORDS", "1")) == "0";
  std::string server = envOr("TALLY_SERVER", "unix:/run/tally/tallyd.sock");
  auto endpoint = address::parseEndpoint(server, error);
  if (!endpoint) {
    spdlog::error("tally: TALLY_SERVER: {}", error);
    connectStatus_ = CUDA_ERROR_NO_DEVICE;
    return;
  }
  // A typo must not quietly make an inference service best-effort.
  std::string priorityName = envOr("TALLY_PRIORITY", "best-effort");
  if (priorityName != "high" && priorityName != "best-effort") {
    spdlog::error("tally: TALLY_PRIORITY='{}': expected 'high' or 'best-effort'", priorityName);
    connectStatus_ = CUDA_ERROR_NO_DEVICE;
    return;
  }
  auto priority = priorityName == "high" ? wire::PriorityClass::HIGH_PRIORITY : wire::PriorityClass::BEST_EFFORT;
  CUresult refusal = CUDA_SUCCESS;
  connection_ =
      Connection::open(*endpoint, envOr("TALLY_TENANT", defaultTenantName().c_str()), priority, error, &refusal);
  if (!connection_) {
    spdlog::error("tally: {}", error);
    connectStatus_ = refusal != CUDA_SUCCESS ? refusal : CUDA_ERROR_NO_DEVICE;
    return;
  }
  auto welcome = connection_->welcome();
  sharedHostMemory_ = welcome.getSharedHostMemory() && envOr("TALLY_SHARED_HOST_MEMORY", "1") != "0";
  driverVersion_ = welcome.getDriverVersion();
  for (auto d : welcome.getDevices()) {
    DeviceView view;
    view.name = d.getName();
    view.major = d.getMajor();
    view.minor = d.getMinor();
    view.totalMem = d.getTotalMem();
    auto props = d.getProperties();
    if (props.size() == sizeof(cudaDeviceProp)) std::memcpy(&view.properties, props.begin(), props.size());
    for (int a : d.getAttributes()) view.attributes.push_back(a);
    view.streamPriorityLeast = d.getStreamPriorityLeast();
    view.streamPriorityGreatest = d.getStreamPriorityGreatest();
    auto uuid = d.getUuid();
    if (uuid.size() == sizeof(view.uuid.bytes)) std::memcpy(view.uuid.bytes, uuid.begin(), uuid.size());
    for (auto row : d.getP2pAttributes()) {
      std::vector<int>& values = view.p2p.emplace_back();
      for (int v : row) values.push_back(v);
    }
    devices_.push_back(std::move(view));
    if (devices_.size() == kMaxDevices) break;
  }
  connection_->setHostFuncHandler([this](const HostFuncNotice& n) { runHostFunc(n); });
  connectStatus_ = CUDA_SUCCESS;
}

CUresult ClientRuntime::ready() {
  std::call_once(connectOnce_, [this] { connect(); });
  if (connectStatus_ != CUDA_SUCCESS) return connectStatus_;
  return connection_->broken() ? connection_->lostStatus() : CUDA_SUCCESS;
}

namespace {
void buildCall(capnp::MallocMessageBuilder& message, uint64_t id, const CallBuilder& build) {
  auto call = message.initRoot<wire::ClientMessage>().initCalls(1)[0];
  call.setId(id);
  build(call);
}
}  // namespace

CUresult ClientRuntime::post(const CallBuilder& build, std::span<const iovec> bulk) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  capnp::MallocMessageBuilder message(128);
  buildCall(message, 0, build);
  return bulk.empty() ? connection_->post(message) : connection_->send(message, bulk);
}

CUresult ClientRuntime::postNow(const CallBuilder& build) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  capnp::MallocMessageBuilder message(128);
  buildCall(message, 0, build);
  return connection_->send(message);
}

CUresult ClientRuntime::call(const CallBuilder& build, ReplyMessage* reply, std::span<const iovec> bulk, int fd) {
  return roundTrip(build, reply, bulk, fd, false);
}

CUresult ClientRuntime::roundTrip(const CallBuilder& build, ReplyMessage* reply, std::span<const iovec> bulk, int fd,
                                  bool word) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  capnp::MallocMessageBuilder message(128);
  uint64_t id = connection_->nextCallId();
  buildCall(message, id, build);
  // A word never holds 0 for a call: an id whose low 32 bits are 0 goes without.
  FreeSlots::Lease slot = word && !completionWordsOff_ && static_cast<uint32_t>(id) != 0
                              ? connection_->takeCompletionSlot() : FreeSlots::Lease();
  if (slot) message.getRoot<wire::ClientMessage>().getCalls()[0].setCompletionSlot(slot.index() + 1);
  ReplyMessage local;
  ReplyMessage& out = reply != nullptr ? *reply : local;
  if (CUresult r = connection_->roundTrip(id, message, out, bulk, fd, slot ? &connection_->completionWord(slot) : nullptr);
      r != CUDA_SUCCESS) {
    return r;
  }
  auto answer = out.reply();
  if (answer.getDeferredStatus() != CUDA_SUCCESS) {
    int expected = CUDA_SUCCESS;
    pendingAsyncError_.compare_exchange_strong(expected, answer.getDeferredStatus());
  }
  return static_cast<CUresult>(answer.getStatus());
}

CUresult ClientRuntime::sync(const CallBuilder& build, ReplyMessage* reply, std::span<const iovec> bulk) {
  CUresult own = roundTrip(build, reply, bulk, -1, true);
  CUresult earlier = static_cast<CUresult>(pendingAsyncError_.exchange(CUDA_SUCCESS));
  return own != CUDA_SUCCESS ? own : earlier;
}

void ClientRuntime::noteStreamDrained(uint64_t stream, uint64_t message) {
  std::lock_guard lock(drainedMutex_);
  drained_[stream] = message;
}

bool ClientRuntime::streamDrained(uint64_t stream) {
  if (!connection_) return false;
  uint64_t sent = connection_->messagesSent();
  std::lock_guard lock(drainedMutex_);
  auto it = drained_.find(stream);
  return it != drained_.end() && it->second == sent;
}

CUresult ClientRuntime::startCall(Connection::PendingCall& pending, const CallBuilder& build) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  capnp::MallocMessageBuilder message(128);
  pending.id = connection_->nextCallId();
  buildCall(message, pending.id, build);
  return connection_->startCall(pending, message);
}

CUresult ClientRuntime::finishCall(Connection::PendingCall& pending) {
  ReplyMessage reply;
  if (CUresult r = connection_->finishCall(pending, reply); r != CUDA_SUCCESS) return r;
  if (int deferred = reply.reply().getDeferredStatus(); deferred != CUDA_SUCCESS) {
    int expected = CUDA_SUCCESS;
    pendingAsyncError_.compare_exchange_strong(expected, deferred);
  }
  return static_cast<CUresult>(reply.reply().getStatus());
}

StagingRing* ClientRuntime::stagingRing() {
  if (!sharedHostMemory_ || ready() != CUDA_SUCCESS) return nullptr;
  std::call_once(stagingRingOnce_, [this] { stagingRing_ = StagingRing::open(*this); });
  return stagingRing_.get();
}

MapSharedRegion ClientRuntime::sharedRegionMapper() {
  return [this](size_t bytes, void*& local, uint64_t& serverAddress) {
    return mapSharedHostMemory(bytes, local, serverAddress);
  };
}

LandingAreas* ClientRuntime::landingAreas() {
  if (!sharedHostMemory_ || completionWordsOff_ || ready() != CUDA_SUCCESS) return nullptr;
  std::call_once(landingAreasOnce_, [this] { landingAreas_ = LandingAreas::open(sharedRegionMapper()); });
  return landingAreas_.get();
}

HostCallbackWords* ClientRuntime::hostCallbackWords() {
  if (!sharedHostMemory_ || ready() != CUDA_SUCCESS) return nullptr;
  std::call_once(callbackWordsOnce_, [this] {
    callbackWords_ = HostCallbackWords::open(sharedRegionMapper(), [this] { hostCallbacksRun_.fetch_add(1); });
  });
  return callbackWords_.get();
}

CUresult ClientRuntime::mapSharedHostMemory(size_t size, void*& out, uint64_t& serverAddress) {
  std::string error;
  int fd = createSealedMemfd(size, error);
  if (fd < 0) {
    spdlog::error("tally: cannot create {} bytes of memory shared with tallyd: {}", size, error);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ReplyMessage reply;
  CUresult r = call([&](wire::Call::Builder c) {
    auto reg = c.initHostRegister();
    reg.setClientAddress(reinterpret_cast<uint64_t>(p));
    reg.setSize(size);
  }, &reply, {}, fd);
  ::close(fd);
  if (r != CUDA_SUCCESS) {
    ::munmap(p, size);
    return r;
  }
  out = p;
  serverAddress = reply.reply().getValue();
  return CUDA_SUCCESS;
}

void ClientRuntime::runHostFunc(const HostFuncNotice& notice) {
  // The notice names an id this process issued; it is looked up, never called as an address.
  std::optional<std::function<void()>> callback = messageCallbacks_.take(notice.callback);
  if (!callback) {
    spdlog::error("tally: tallyd at {} named host callback {} on stream {}, which this process did not issue "
                  "(or which already ran); ignored", connection_->endpointText(), notice.callback, notice.stream);
    return;
  }
  callbackThread().push([this, notice, run = std::move(*callback)] {
    run();
    hostCallbacksRun_.fetch_add(1);
    post([&](wire::Call::Builder c) {
      auto done = c.initHostFuncDone();
      done.setStream(notice.stream);
      done.setSequence(notice.sequence);
    });
  });
}

void ClientRuntime::waitForHostCallbacks() {
  // Polled rather than waited on: a broken connection means they never run.
  uint64_t target = hostCallbacksEnqueued_.load();
  while (hostCallbacksRun_.load() < target && !connection_->broken()) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// --- streams ---------------------------------------------------------------------------

bool isLegacyStream(CUstream stream) {
  auto raw = reinterpret_cast<uintptr_t>(stream);
  return (raw == 0 && !nullStreamIsPerThread()) || raw == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY);
}

uint64_t ClientRuntime::streamId(CUstream stream) {
  auto raw = reinterpret_cast<uintptr_t>(stream);
  if (isLegacyStream(stream)) return static_cast<uint64_t>(threadState().device) + 1;
  if (raw == 0 || raw == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD)) {
    ThreadState& t = threadState();
    if (t.perThreadStream == nullptr) t.perThreadStream = createStream(static_cast<uint32_t>(t.device), 0, 0);
    return t.perThreadStream != nullptr ? t.perThreadStream->id : 0;
  }
  StreamHandle* s = checkedHandle<StreamHandle>(stream, HandleMagic::kStream);
  return s != nullptr ? s->id : 0;
}

StreamHandle* ClientRuntime::createStream(uint32_t device, unsigned flags, int priority) {
  auto* s = new StreamHandle();
  s->id = newHandleId();
  s->device = device;
  s->flags = flags;
  const DeviceView& d = devices_[device];
  s->priority = std::clamp(priority, d.streamPriorityGreatest, d.streamPriorityLeast);
  CUresult r = post([&](wire::Call::Builder c) {
    auto create = c.initStreamCreate();
    create.setDevice(device);
    create.setStream(s->id);
    create.setNonBlocking((flags & CU_STREAM_NON_BLOCKING) != 0);
    create.setPriority(s->priority);
  });
  if (r != CUDA_SUCCESS) {
    delete s;
    return nullptr;
  }
  registerHandle(s);
  return s;
}

uint32_t ClientRuntime::streamDevice(CUstream stream) {
  StreamHandle* s = checkedHandle<StreamHandle>(stream, HandleMagic::kStream);
  auto raw = reinterpret_cast<uintptr_t>(stream);
  if (s != nullptr && raw > 2) return s->device;
  return static_cast<uint32_t>(threadState().device);
}

// --- memory tables -----------------------------------------------------------------------

void ClientRuntime::addDeviceRegion(CUdeviceptr base, DeviceRegion region) {
  std::lock_guard lock(tablesMutex_);
  deviceRegions_[base] = region;
}

std::vector<std::pair<CUdeviceptr, DeviceRegion>> ClientRuntime::allocationsOn(uint32_t device) {
  std::lock_guard lock(tablesMutex_);
  std::vector<std::pair<CUdeviceptr, DeviceRegion>> out;
  for (const auto& [base, region] : deviceRegions_) {
    if (region.allocation && region.device == device) out.emplace_back(base, region);
  }
  return out;
}

bool ClientRuntime::removeDeviceRegion(CUdeviceptr base) {
  std::lock_guard lock(tablesMutex_);
  return deviceRegions_.erase(base) != 0;
}

namespace {
// The entry whose [base, base + size) holds `address` in a map keyed by base.
template <typename Map>
std::optional<typename Map::value_type> findRange(const Map& map, typename Map::key_type address) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) return std::nullopt;
  --it;
  if (address - it->first >= std::max<size_t>(it->second.size, 1)) return std::nullopt;
  return *it;
}
}  // namespace

std::optional<std::pair<CUdeviceptr, DeviceRegion>> ClientRuntime::findDeviceRegion(uint64_t address) {
  std::lock_guard lock(tablesMutex_);
  auto found = findRange(deviceRegions_, address);
  if (!found) return std::nullopt;
  return std::pair<CUdeviceptr, DeviceRegion>(found->first, found->second);
}

void ClientRuntime::addHostRegion(const void* base, HostRegion region) {
  std::lock_guard lock(tablesMutex_);
  hostRegions_[reinterpret_cast<uintptr_t>(base)] = region;
}

std::optional<HostRegion> ClientRuntime::removeHostRegion(const void* base) {
  std::lock_guard lock(tablesMutex_);
  auto it = hostRegions_.find(reinterpret_cast<uintptr_t>(base));
  if (it == hostRegions_.end()) return std::nullopt;
  HostRegion region = it->second;
  hostRegions_.erase(it);
  return region;
}

std::optional<std::pair<uintptr_t, HostRegion>> ClientRuntime::findHostRegion(const void* address) {
  std::lock_guard lock(tablesMutex_);
  auto found = findRange(hostRegions_, reinterpret_cast<uintptr_t>(address));
  if (!found) return std::nullopt;
  return std::pair<uintptr_t, HostRegion>(found->first, found->second);
}

std::vector<std::pair<uintptr_t, HostRegion>> ClientRuntime::hostRegionsOverlapping(uintptr_t begin, uintptr_t end) {
  std::lock_guard lock(tablesMutex_);
  std::vector<std::pair<uintptr_t, HostRegion>> out;
  auto it = hostRegions_.upper_bound(begin);
  if (it != hostRegions_.begin()) --it;
  for (; it != hostRegions_.end() && it->first < end; ++it) {
    if (it->first + std::max<size_t>(it->second.size, 1) > begin) out.emplace_back(it->first, it->second);
  }
  return out;
}

// --- registration --------------------------------------------------------------------------

FatbinRecord* ClientRuntime::registerFatbin(const void* wrapper) {
  auto record = std::make_unique<FatbinRecord>();
  record->wrapper = wrapper;
  std::lock_guard lock(registryMutex_);
  fatbins_.push_back(std::move(record));
  return fatbins_.back().get();
}

void ClientRuntime::registerKernel(FatbinRecord* fatbin, const void* hostFunction, const char* deviceName) {
  auto record = std::make_unique<KernelRecord>();
  record->fatbin = fatbin;
  record->deviceName = deviceName;
  record->hostFunction = hostFunction;
  std::lock_guard lock(registryMutex_);
  kernelRecords_.insert(record.get());
  auto& slot = kernels_[hostFunction];
  if (slot) kernelRecords_.erase(slot.get());
  slot = std::move(record);
}

void ClientRuntime::registerVariable(FatbinRecord* fatbin, const void* hostVariable, const char* deviceName, size_t size) {
  auto record = std::make_unique<VariableRecord>();
  record->fatbin = fatbin;
  record->deviceName = deviceName;
  record->size = size;
  std::lock_guard lock(registryMutex_);
  variables_[hostVariable] = std::move(record);
}

KernelRecord* ClientRuntime::kernelFor(const void* hostFunctionOrKernel) {
  std::lock_guard lock(registryMutex_);
  auto it = kernels_.find(hostFunctionOrKernel);
  if (it != kernels_.end()) return it->second.get();
  // A cudaKernel_t from __cudaGetKernel is one of our records; check it is before using it.
  if (kernelRecords_.count(hostFunctionOrKernel) != 0) {
    return static_cast<KernelRecord*>(const_cast<void*>(hostFunctionOrKernel));
  }
  return nullptr;
}

VariableRecord* ClientRuntime::variableFor(const void* hostVariable) {
  std::lock_guard lock(registryMutex_);
  auto it = variables_.find(hostVariable);
  return it == variables_.end() ? nullptr : it->second.get();
}

// --- modules -------------------------------------------------------------------------------

CUresult ClientRuntime::sendModule(const SelectedImage& selected, uint32_t device, ModuleHandle*& out) {
  const std::string& image = selected.bytes;
  const std::string& sourcePtx = selected.sourcePtx;
  // One hash over both, so that tallyd never pairs an image with another module's PTX.
  hash::ContentHash hash = sourcePtx.empty() ? hash::contentHash(image.data(), image.size())
                                             : hash::contentHash((image + sourcePtx).data(), image.size() + sourcePtx.size());
  const bool ptx = selected.ptx;
  auto* module = new ModuleHandle();
  module->id = newHandleId();
  module->device = device;
  auto build = [&](bool withImage) {
    return [&, withImage](wire::Call::Builder c) {
      auto load = c.initModuleLoad();
      load.setDevice(device);
      load.setModule(module->id);
      load.setHash(kj::arrayPtr(hash.data(), hash.size()));
      load.setKind(ptx ? wire::ImageKind::PTX : wire::ImageKind::CUBIN);
      load.setImageSize(image.size());
      load.setPtxSize(sourcePtx.size());
      load.setHasImage(withImage);
    };
  };
  ReplyMessage reply;
  CUresult r = call(build(false), &reply);
  if (r == CUDA_SUCCESS && reply.reply().isModuleLoad() && reply.reply().getModuleLoad().getNeedImage()) {
    iovec bulk[2] = {{const_cast<char*>(image.data()), image.size()},
                     {const_cast<char*>(sourcePtx.data()), sourcePtx.size()}};
    r = call(build(true), &reply, std::span<const iovec>(bulk, sourcePtx.empty() ? 1 : 2));
  }
  if (r != CUDA_SUCCESS) {
    delete module;
    return r;
  }
  registerHandle(module);
  out = module;
  return CUDA_SUCCESS;
}

namespace {

// The PTX entry a cubin entry was compiled from (same virtual arch), if the fatbin has it.
// PTX of a lower arch is not offered: it would miss the cubin's __CUDA_ARCH__ code paths.
std::string sourcePtxOf(const std::vector<fatbin::Entry>& entries, const fatbin::Entry& cubin) {
  for (const fatbin::Entry& e : entries) {
    if (e.kind == fatbin::EntryKind::kPtx && e.smArch == cubin.smArch && e.archSpecific == cubin.archSpecific &&
        e.familySpecific == cubin.familySpecific) {
      return e.payload;
    }
  }
  return {};
}

// The image tallyd's device can load: a matching cubin, else PTX to JIT.
CUresult selectImage(const void* image, const DeviceView& device, SelectedImage& out) {
  std::string& bytes = out.bytes;
  bool& ptx = out.ptx;
  fatbin::ModuleImage m = fatbin::moduleImage(image);
  switch (m.kind) {
    case fatbin::ImageKind::kCubin:
      bytes.assign(reinterpret_cast<const char*>(m.bytes.data()), m.bytes.size());
      ptx = false;
      return CUDA_SUCCESS;
    case fatbin::ImageKind::kPtx:
      bytes.assign(reinterpret_cast<const char*>(m.bytes.data()), m.bytes.size());
      while (!bytes.empty() && bytes.back() == '\0') bytes.pop_back();
      ptx = true;
      return CUDA_SUCCESS;
    case fatbin::ImageKind::kWrapper:
    case fatbin::ImageKind::kContainer: {
      std::vector<fatbin::Entry> entries;
      std::string error;
      std::span<const uint8_t> container = m.bytes;
      fatbin::WrapperView view;
      // nvcc 13 registers a version-2 (device-link) wrapper in every program; its own
      // container is loadable like a version-1 one.
      if (m.kind == fatbin::ImageKind::kWrapper && container.empty() && fatbin::readWrapper(image, view, error)) {
        container = view.container;
      }
      if (!fatbin::parseContainer(container, entries, error)) {
        spdlog::error("tally: cannot parse a fatbin: {}", error);
        return CUDA_ERROR_INVALID_IMAGE;
      }
      const fatbin::Entry* entry = fatbin::selectForDevice(entries, device.major, device.minor);
      if (entry == nullptr) {
        spdlog::error("tally: no code in this fatbin runs on sm_{}{} ({} entries)", device.major, device.minor, entries.size());
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
      }
      bytes = entry->payload;
      ptx = entry->kind == fatbin::EntryKind::kPtx;
      if (ptx) {
        while (!bytes.empty() && bytes.back() == '\0') bytes.pop_back();
      } else {
        out.sourcePtx = sourcePtxOf(entries, *entry);
        while (!out.sourcePtx.empty() && out.sourcePtx.back() == '\0') out.sourcePtx.pop_back();
      }
      return CUDA_SUCCESS;
    }
    case fatbin::ImageKind::kUnknown:
      break;
  }
  return CUDA_ERROR_INVALID_IMAGE;
}

}  // namespace

CUresult ClientRuntime::loadModuleImage(const void* image, uint32_t device, ModuleHandle*& out) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (device >= devices_.size()) return CUDA_ERROR_INVALID_DEVICE;
  SelectedImage selected;
  if (CUresult r = selectImage(image, devices_[device], selected); r != CUDA_SUCCESS) return r;
  return sendModule(selected, device, out);
}

CUresult ClientRuntime::ensureFatbinModule(FatbinRecord& fatbin, uint32_t device, ModuleHandle*& out) {
  std::lock_guard lock(fatbin.mutex);
  if (fatbin.modules[device] == nullptr) {
    if (CUresult r = loadModuleImage(fatbin.wrapper, device, fatbin.modules[device]); r != CUDA_SUCCESS) return r;
  }
  out = fatbin.modules[device];
  return CUDA_SUCCESS;
}

CUresult ClientRuntime::functionOf(ModuleHandle* module, const char* name, FunctionHandle*& out) {
  std::lock_guard lock(module->mutex);
  for (FunctionHandle* f : module->functions) {
    if (f->name == name) {
      out = f;
      return CUDA_SUCCESS;
    }
  }
  auto* f = new FunctionHandle();
  f->id = newHandleId();
  f->module = module;
  f->name = name;
  ReplyMessage reply;
  CUresult r = call([&](wire::Call::Builder c) {
    auto get = c.initModuleGetFunction();
    get.setModule(module->id);
    get.setFunction(f->id);
    get.setName(name);
  }, &reply);
  if (r != CUDA_SUCCESS || !reply.reply().isFunction()) {
    delete f;
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_FOUND;
  }
  auto info = reply.reply().getFunction();
  for (auto p : info.getParams()) {
    f->params.emplace_back(p.getOffset(), p.getSize());
    f->paramBytes = std::max<size_t>(f->paramBytes, p.getOffset() + p.getSize());
  }
  for (int a : info.getAttributes()) f->attributes.push_back(a);
  module->functions.push_back(f);
  {
    std::lock_guard registry(registryMutex_);
    functionsById_[f->id] = f;
  }
  registerHandle(f);
  out = f;
  return CUDA_SUCCESS;
}

FunctionHandle* ClientRuntime::functionById(uint64_t id) {
  FunctionHandle* f = nullptr;
  {
    std::lock_guard lock(registryMutex_);
    auto it = functionsById_.find(id);
    if (it != functionsById_.end()) f = it->second;
  }
  // An unloaded module's functions stay allocated but are no longer valid handles.
  return f != nullptr && handleRegistry().contains(f, HandleMagic::kFunction) ? f : nullptr;
}

const void* ClientRuntime::hostFunctionOf(const FunctionHandle* f) {
  std::lock_guard lock(registryMutex_);
  uint32_t device = f->module->device;
  for (const auto& [host, kernel] : kernels_) {
    if (device < kMaxDevices && kernel->functions[device].load(std::memory_order_acquire) == f) return host;
  }
  return nullptr;
}

CUresult ClientRuntime::functionOf(KernelRecord* kernel, uint32_t device, FunctionHandle*& out) {
  if (device >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  out = kernel->functions[device].load(std::memory_order_acquire);
  if (out != nullptr) return CUDA_SUCCESS;
  ModuleHandle* module = nullptr;
  if (CUresult r = ensureFatbinModule(*kernel->fatbin, device, module); r != CUDA_SUCCESS) return r;
  if (CUresult r = functionOf(module, kernel->deviceName, out); r != CUDA_SUCCESS) return r;
  kernel->functions[device].store(out, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult ClientRuntime::runtimeFunction(const void* func, uint32_t device, FunctionHandle*& out) {
  if (KernelRecord* kernel = kernelFor(func); kernel != nullptr) return functionOf(kernel, device, out);
  FunctionHandle* f = checkedHandle<FunctionHandle>(func, HandleMagic::kFunction);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;  // what CUDA 13 returns for a non-kernel
  out = f;
  return CUDA_SUCCESS;
}

CUresult ClientRuntime::variableAddress(VariableRecord* variable, uint32_t device, CUdeviceptr& out) {
  if (device >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  if (variable->addresses[device] != 0) {
    out = variable->addresses[device];
    return CUDA_SUCCESS;
  }
  ModuleHandle* module = nullptr;
  if (CUresult r = ensureFatbinModule(*variable->fatbin, device, module); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = call([&](wire::Call::Builder c) {
    auto get = c.initModuleGetGlobal();
    get.setModule(module->id);
    get.setName(variable->deviceName);
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  out = variable->addresses[device] = reply.reply().getGlobal().getPtr();
  addDeviceRegion(out, {.size = reply.reply().getGlobal().getSize(), .device = device});
  return CUDA_SUCCESS;
}

CUresult ClientRuntime::queryOccupancy(const FunctionHandle& f, const OccupancyQuery& q, uint64_t& value) {
  ReplyMessage reply;
  CUresult r = call([&](wire::Call::Builder c) {
    auto o = c.initOccupancy();
    o.setFunction(f.id);
    o.setBlockSize(q.blockSize);
    o.setDynamicSmem(q.dynamicSmem);
    o.setFlags(q.flags);
    o.setAvailableDynamicSmem(q.availableDynamicSmem);
    o.setNumBlocks(q.numBlocks);
    if (q.clusters) {
      auto c = o.initClusters();
      auto set = [](wire::Dim3::Builder d, const std::array<unsigned, 3>& v) {
        d.setX(v[0]);
        d.setY(v[1]);
        d.setZ(v[2]);
      };
      set(c.initGrid(), q.clusters->grid);
      set(c.initBlock(), q.clusters->block);
      set(c.initClusterDim(), q.clusters->clusterDim);
      c.setPotentialSize(q.clusters->potentialSize);
    }
  }, &reply);
  if (r == CUDA_SUCCESS) value = reply.reply().getValue();
  return r;
}

ModuleHandle* ClientRuntime::libraryWithoutCode(uint32_t device) {
  auto* module = new ModuleHandle();
  module->device = device;
  registerHandle(module);
  return module;
}

CUresult ClientRuntime::unloadModule(ModuleHandle* module) {
  CUresult r = module->id == 0 ? CUDA_SUCCESS
                               : call([&](wire::Call::Builder c) { c.initModuleUnload().setModule(module->id); });
  // The handles stay allocated (the application may still hold stale copies) but are no longer
  // valid: a later use gets CUDA_ERROR_INVALID_HANDLE, as natively.
  std::lock_guard lock(module->mutex);
  for (FunctionHandle* f : module->functions) handleRegistry().remove(f);
  handleRegistry().remove(module);
  return r;
}

// --- per-thread state and results -------------------------------------------------------

ThreadState& threadState() {
  thread_local ThreadState state;
  return state;
}

cudaError_t toRuntime(CUresult r) {
  // The runtime's codes equal the driver's for every error a forwarded call can return,
  // except the context family, which the runtime reports as device errors.
  switch (r) {
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    default: return static_cast<cudaError_t>(r);
  }
}

cudaError_t finishRuntime(cudaError_t e) {
  if (e != cudaSuccess) threadState().lastError = e;
  return e;
}

cudaError_t finish(CUresult r) { return finishRuntime(toRuntime(r)); }

}  // namespace tally::client
