#include "server/session/module_table.h"

#include "common/fatbin/module_data.h"
#include "server/gpu/cuda_check.h"
#include "server/gpu/gpu.h"
#include "server/transform/chain.h"
#include "server/transform/ptb.h"
#include "server/transform/slice.h"

#include <spdlog/spdlog.h>

namespace tally::server::session {

CUresult ModuleTable::admit(uint64_t id) {
  if (modules_.count(id) != 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!limit_.allowsOneMore(modules_.size())) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

void ModuleTable::insert(uint64_t id, ModuleState state) { modules_.emplace(id, std::move(state)); }

std::optional<ModuleState> ModuleTable::take(uint64_t id) {
  auto it = modules_.find(id);
  if (it == modules_.end()) return std::nullopt;
  ModuleState taken = std::move(it->second);
  modules_.erase(it);
  std::erase_if(functions_, [id](const auto& entry) { return entry.second.module == id; });
  return taken;
}

CUresult ModuleTable::load(gpu::Gpu& g, uint64_t id, const std::string& identity, const std::string& image,
                           const VariantImage* variants) {
  if (CUresult r = admit(id); r != CUDA_SUCCESS) return r;
  g.makeCurrent();
  if (variants != nullptr && variants->cubin) {
    CUresult r = loadInstance(g, id, identity, *variants->cubin, variants->family);
    if (r == CUDA_SUCCESS) return r;
    spdlog::warn("{}: cannot load the {} kernel variants ({}); running the original kernels", tenant_,
                 variants->family, gpu::describe(r));
  }
  return loadInstance(g, id, identity, image, {});
}

// A pooled instance of the image if there is one, else a fresh load (gpu/module_pool.h).
CUresult ModuleTable::loadInstance(gpu::Gpu& g, uint64_t id, const std::string& identity, const std::string& image,
                                   std::string_view family) {
  std::string key = family.empty() ? identity : identity + "/" + std::string(family);
  CUmodule m = g.modulePool().take(key);
  if (m == nullptr) {
    if (CUresult r = cuModuleLoadData(&m, image.data()); r != CUDA_SUCCESS) return r;
    if (fatbin::declaresModuleData({reinterpret_cast<const uint8_t*>(image.data()), image.size()})) key.clear();
  }
  insert(id, ModuleState{&g, m, !family.empty(), identity, std::move(key), {}});
  return CUDA_SUCCESS;
}

ModuleState* ModuleTable::module(uint64_t id) {
  auto it = modules_.find(id);
  return it == modules_.end() ? nullptr : &it->second;
}

bool ModuleTable::unloadsWhenDropped(uint64_t id) const {
  auto it = modules_.find(id);
  return it != modules_.end() && it->second.poolKey.empty();
}

FunctionState* ModuleTable::function(uint64_t id) {
  auto it = functions_.find(id);
  return it == functions_.end() ? nullptr : &it->second;
}

uint64_t ModuleTable::functionIdOf(CUfunction f) const {
  if (f == nullptr) return 0;
  for (const auto& [id, state] : functions_) {
    if (state.function == f) return id;
  }
  return 0;
}

FunctionState& ModuleTable::addFunction(uint64_t id, FunctionState state) {
  return functions_.insert_or_assign(id, std::move(state)).first->second;
}

void ModuleTable::noteAttributeChange(uint64_t moduleId, CUfunction f, CUfunction_attribute a) {
  ModuleState* m = module(moduleId);
  if (m == nullptr || m->poolKey.empty()) return;
  for (const auto& changed : m->changedAttributes) {
    if (changed.function == f && changed.attribute == a) return;
  }
  int original = 0;
  if (cuFuncGetAttribute(&original, a, f) == CUDA_SUCCESS) m->changedAttributes.push_back({f, a, original});
}

void ModuleTable::dropAll() {
  for (auto& [id, m] : modules_) dropModuleInstance(m);
  modules_.clear();
  functions_.clear();
}

CUresult dropModuleInstance(ModuleState& m) {
  m.gpu->makeCurrent();
  if (m.poolKey.empty()) return cuModuleUnload(m.module);
  for (const auto& changed : m.changedAttributes) {
    cuFuncSetAttribute(changed.function, changed.attribute, changed.original);
  }
  m.gpu->modulePool().give(m.poolKey, m.module);
  return CUDA_SUCCESS;
}

namespace {

bool isVariantName(const std::string& name) {
  return name.ends_with(transform::kSlicedSuffix) || name.ends_with(transform::kPtbSuffix) ||
         name.ends_with(transform::kChainedSuffix);
}

}  // namespace

std::vector<std::string> tenantFunctionNames(std::vector<std::string> loaded, bool hasVariants) {
  if (hasVariants) std::erase_if(loaded, isVariantName);
  return loaded;
}

}  // namespace tally::server::session
