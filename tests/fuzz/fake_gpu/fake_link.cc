// The fake driver's JIT linker (cuLinkCreate … cuLinkDestroy), for tallyd's handlers on the
// fake GPU: it "links" by concatenating its inputs, writes a one-line info log into the buffer
// cuLinkCreate named, and refuses an empty input with a line in the error log.
#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

struct FakeLink {
  std::string image;
  char* infoLog = nullptr;
  size_t infoLogBytes = 0;
  char* errorLog = nullptr;
  size_t errorLogBytes = 0;
};

void writeLog(char* buffer, size_t bytes, const std::string& text) {
  if (buffer == nullptr || bytes == 0) return;
  std::snprintf(buffer, bytes, "%s", text.c_str());
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuLinkCreate_v2(unsigned int count, CUjit_option* options, void** values, CUlinkState* stateOut) {
  if (stateOut == nullptr || (count > 0 && (options == nullptr || values == nullptr))) return CUDA_ERROR_INVALID_VALUE;
  auto* link = new FakeLink;
  for (unsigned i = 0; i < count; ++i) {
    auto number = static_cast<size_t>(reinterpret_cast<uintptr_t>(values[i]));
    if (options[i] == CU_JIT_INFO_LOG_BUFFER) link->infoLog = static_cast<char*>(values[i]);
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) link->infoLogBytes = number;
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER) link->errorLog = static_cast<char*>(values[i]);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) link->errorLogBytes = number;
  }
  *stateOut = reinterpret_cast<CUlinkState>(link);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType, void* data, size_t size, const char* name,
                                  unsigned int, CUjit_option*, void**) {
  auto* link = reinterpret_cast<FakeLink*>(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (data == nullptr || size == 0) {
    writeLog(link->errorLog, link->errorLogBytes, std::string("empty input ") + (name != nullptr ? name : ""));
    return CUDA_ERROR_INVALID_PTX;
  }
  link->image.append(static_cast<const char*>(data), size);
  // Each input's compile lines, then cuLinkComplete starts the buffer over (the case tallyd's
  // accumulation of the logs covers).
  writeLog(link->infoLog, link->infoLogBytes, std::to_string(link->image.size()) + " bytes compiled;");
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  auto* link = reinterpret_cast<FakeLink*>(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (cubinOut == nullptr || sizeOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  writeLog(link->infoLog, link->infoLogBytes, "fake link: " + std::to_string(link->image.size()) + " bytes");
  *cubinOut = link->image.data();
  *sizeOut = link->image.size();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkDestroy(CUlinkState state) {
  delete reinterpret_cast<FakeLink*>(state);
  return CUDA_SUCCESS;
}

}  // extern "C"
