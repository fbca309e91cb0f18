// Makes libraries that are opened by name find the client's forwarding instead of the real
// library. The client exports cuFFT under libcufft.so.12's symbol version, which reaches every
// program linked against cuFFT. XLA instead dlopens "libcufft.so.12" and looks the functions up
// in that handle only, and JAX first loads NVIDIA's copy by its full path. The dynamic loader
// answers a dlopen by name with the first loaded object of that soname. So when the client is
// loaded, it loads libtally_cufft.so first: an empty library of that soname whose one dependency
// is the client. A lookup in its handle then reaches the client's functions. TALLY_CUFFT=0
// leaves cuFFT to the application (it then runs in the application and fails without a driver
// table the client does not serve).
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr const char* kCufftSoname = "libtally_cufft.so";

// The directory the client was loaded from ("" if unknown).
std::string clientDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&clientDirectory), &info) == 0 || info.dli_fname == nullptr) return {};
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

__attribute__((constructor)) void loadCufftSoname() {
  if (const char* v = std::getenv("TALLY_CUFFT"); v != nullptr && std::strcmp(v, "0") == 0) return;
  std::string dir = clientDirectory();
  if (dir.empty()) return;
  std::string path = dir + "/" + kCufftSoname;
  // RTLD_GLOBAL: a program that links cuFFT later (its DT_NEEDED) resolves against it too.
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    spdlog::debug("tally: {} not loaded ({}): libraries that dlopen cuFFT by name get NVIDIA's", path, dlerror());
  }
}

}  // namespace
