#include "server/library/library_loader.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <array>
#include <mutex>

namespace tally::server::library {
namespace {

struct Loaded {
  std::once_flag once;
  void* handle = nullptr;
};

std::array<Loaded, kLibraries>& loaded() {
  static std::array<Loaded, kLibraries> libs;
  return libs;
}

std::string& directory() {
  static std::string dir;
  return dir;
}

void* open(Library lib) {
  const char* soname = sonameOf(lib);
  if (!directory().empty()) {
    if (void* h = dlopen((directory() + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  }
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    spdlog::error("tallyd cannot load {} ({}); its calls answer NOT_INITIALIZED. Install it on the GPU host, "
                  "or point library_dir (tallyd config) or LD_LIBRARY_PATH at it.", soname, dlerror());
  } else {
    spdlog::info("loaded {}", soname);
  }
  return h;
}

}  // namespace

const char* sonameOf(Library lib) {
  switch (lib) {
    case Library::kCublas: return "libcublas.so.13";
    case Library::kCublasLt: return "libcublasLt.so.13";
    case Library::kCudnn: return "libcudnn.so.9";
    case Library::kCufft: return "libcufft.so.12";
  }
  return "";
}

void setLibraryDirectory(std::string dir) { directory() = std::move(dir); }

void* librarySymbol(Library lib, const char* name) {
  Loaded& l = loaded()[static_cast<size_t>(lib)];
  std::call_once(l.once, [&] { l.handle = open(lib); });
  if (l.handle == nullptr) return nullptr;
  void* sym = dlsym(l.handle, name);
  if (sym == nullptr) spdlog::warn("{} has no {}", sonameOf(lib), name);
  return sym;
}

}  // namespace tally::server::library
