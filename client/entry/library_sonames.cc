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
#include <limits.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr const char* kCufftSoname = "libtally_cufft.so";

// Where libtally_cufft.so may be: next to the path the client was loaded by, and next to the file
// it resolves to (a bundle's lib/driver/libcuda.so.1 is a link to ../libtally_client.so).
std::vector<std::string> candidates() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&candidates), &info) == 0 || info.dli_fname == nullptr) return {};
  std::vector<std::string> paths;
  auto besideOf = [&](const std::string& file) {
    size_t slash = file.rfind('/');
    if (slash != std::string::npos) paths.push_back(file.substr(0, slash + 1) + kCufftSoname);
  };
  besideOf(info.dli_fname);
  if (char* real = realpath(info.dli_fname, nullptr)) {
    besideOf(real);
    std::free(real);
  }
  return paths;
}

__attribute__((constructor)) void loadCufftSoname() {
  if (const char* v = std::getenv("TALLY_CUFFT"); v != nullptr && std::strcmp(v, "0") == 0) return;
  for (const std::string& path : candidates()) {
    // RTLD_GLOBAL: a program that links cuFFT later (its DT_NEEDED) resolves against it too.
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return;
    spdlog::debug("tally: {} not loaded ({})", path, dlerror());
  }
  spdlog::debug("tally: no {} beside the client: libraries that dlopen cuFFT by name get NVIDIA's", kCufftSoname);
}

}  // namespace
