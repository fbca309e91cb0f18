// The modules one tenant loaded and the functions it resolved in them, by the client's handles.
// Bookkeeping (admit, insert, take, lookups) needs no driver and is unit-tested; loading, the
// attribute notes and giving instances back (load, noteAttributeChange, dropAll) are the
// driver edges.
#pragma once

#include "server/session/count_limit.h"

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

struct FunctionState {
  gpu::Gpu* gpu = nullptr;
  CUfunction function = nullptr;
  std::vector<std::pair<uint32_t, uint32_t>> params;  // (offset, size)
  size_t paramBytes = 0;
  // Variants, when the module was loaded with them (server/transform); null otherwise.
  CUfunction sliced = nullptr;
  CUfunction ptb = nullptr;
  CUfunction chained = nullptr;
  std::string profileKey;  // "<module hash>/<kernel name>": what the scheduler learns durations by
  uint64_t module = 0;     // the client's handle of the module it came from
};

// A compiled variant module (server/transform/variant_module.h) to load instead of the client's
// image, and the name of its family: instances of different families never share a pool slot.
struct VariantImage {
  std::shared_ptr<const std::string> cubin;
  std::string family;
};

struct ModuleState {
  gpu::Gpu* gpu = nullptr;
  CUmodule module = nullptr;
  bool hasVariants = false;  // loaded from the compiled variant module instead of the client's image
  std::string identity;      // hex content hash of the client's module
  std::string poolKey;       // where the instance goes back to (gpu::ModulePool); empty: unloaded
  // Function attributes this tenant changed, with their values before: restored before the
  // instance goes back to the pool.
  struct ChangedAttribute {
    CUfunction function;
    CUfunction_attribute attribute;
    int original;
  };
  std::vector<ChangedAttribute> changedAttributes;
};

class ModuleTable {
 public:
  // `maxModules` 0 = unlimited.
  ModuleTable(uint64_t maxModules, std::string tenant) : limit_("modules", maxModules, tenant), tenant_(tenant) {}

  // Loads `variants` (the compiled variant module of the image's PTX) when given and loadable,
  // else `image`; a pooled instance of the same image and family when the GPU's pool has one.
  CUresult load(gpu::Gpu& g, uint64_t id, const std::string& identity, const std::string& image,
                const VariantImage* variants = nullptr);
  // Whether a module may be added under `id`: CUDA_ERROR_INVALID_HANDLE if the handle is taken,
  // CUDA_ERROR_OUT_OF_MEMORY past max_modules (what a driver out of resources answers).
  CUresult admit(uint64_t id);
  void insert(uint64_t id, ModuleState state);
  // Forgets the module and every function resolved in it (their handles would otherwise name
  // an instance that may now be another tenant's) and returns it; nullopt if unknown.
  std::optional<ModuleState> take(uint64_t id);

  ModuleState* module(uint64_t id);
  FunctionState* function(uint64_t id);
  // The client's handle of the function whose original kernel is `f` (what a graph's kernel node
  // names); 0 if none of this tenant's functions is. A scan: graph node queries are rare.
  uint64_t functionIdOf(CUfunction f) const;
  FunctionState& addFunction(uint64_t id, FunctionState state);
  // Call before changing attribute `a` of function `f` of module `moduleId`: a pooled instance
  // gets its earlier value back when this tenant is done with it.
  void noteAttributeChange(uint64_t moduleId, CUfunction f, CUfunction_attribute a);

  // True if module `id` is unloaded (not given back to the pool) when dropped.
  bool unloadsWhenDropped(uint64_t id) const;
  size_t moduleCount() const { return modules_.size(); }
  size_t functionCount() const { return functions_.size(); }
  // Gives every instance back (pool or unload) and forgets everything: the end of the tenancy.
  void dropAll();

 private:
  // `family` empty: the client's own image.
  CUresult loadInstance(gpu::Gpu& g, uint64_t id, const std::string& identity, const std::string& image,
                        std::string_view family);

  CountLimit limit_;
  std::string tenant_;
  std::unordered_map<uint64_t, ModuleState> modules_;
  std::unordered_map<uint64_t, FunctionState> functions_;
};

// Back to the GPU's module pool, or unloaded when the image declares module-scope data.
CUresult dropModuleInstance(ModuleState& m);

// The kernels of a tenant's module, from the functions of its loaded instance (in the driver's
// order): an instance loaded from the compiled variant module (`hasVariants`) also holds tallyd's
// sliced and PTB variants, which are not the tenant's and are left out.
std::vector<std::string> tenantFunctionNames(std::vector<std::string> loaded, bool hasVariants);

}  // namespace tally::server::session
