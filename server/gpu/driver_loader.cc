#include "server/gpu/driver_loader.h"

#include <dlfcn.h>

#include <mutex>

namespace tally::server::gpu {
namespace {

constexpr const char* kDriverLibrary = "libcuda.so.1";

struct DriverLibrary {
  void* handle = nullptr;
  std::string error;  // dlerror() text when handle is null
};

const DriverLibrary& driverLibrary() {
  static DriverLibrary library;
  static std::once_flag once;
  std::call_once(once, [] {
    // RTLD_LOCAL: the driver's symbols stay out of the global scope, so they
    // never interpose on the shim's definitions (or anything else) by name.
    library.handle = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
    if (library.handle == nullptr) {
      const char* e = dlerror();
      library.error = e != nullptr ? e : std::string("dlopen(\"") + kDriverLibrary + "\") failed";
    }
  });
  return library;
}

}  // namespace

void* driverSymbol(const char* name) {
  const DriverLibrary& library = driverLibrary();
  if (library.handle == nullptr || name == nullptr) return nullptr;
  // dlsym on the handle searches libcuda and its dependencies only, never the
  // executable, so this finds the driver's own definition and not the shim's.
  return dlsym(library.handle, name);
}

bool driverLoaded(std::string* error) {
  const DriverLibrary& library = driverLibrary();
  if (library.handle != nullptr) return true;
  if (error != nullptr) *error = library.error;
  return false;
}

}  // namespace tally::server::gpu
