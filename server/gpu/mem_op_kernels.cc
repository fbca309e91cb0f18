#include "server/gpu/mem_op_kernels.h"

namespace tally::server::gpu {

namespace {

// One entry per width; the comparison codes are CU_STREAM_WAIT_VALUE_GEQ (0: (int)(*a - v) >= 0),
// _EQ (1), _AND (2: (*a & v) != 0) and _NOR (3: ~(*a | v) != 0).
constexpr const char* kMemOpPtx = R"(
.version 8.0
.target sm_70
.address_size 64

.visible .entry tally_write32(.param .u64 address, .param .u32 value) {
  .reg .u64 %a;
  .reg .u32 %v;
  ld.param.u64 %a, [address];
  ld.param.u32 %v, [value];
  st.volatile.global.u32 [%a], %v;
  membar.sys;
  ret;
}

.visible .entry tally_write64(.param .u64 address, .param .u64 value) {
  .reg .u64 %a, %v;
  ld.param.u64 %a, [address];
  ld.param.u64 %v, [value];
  st.volatile.global.u64 [%a], %v;
  membar.sys;
  ret;
}

.visible .entry tally_wait32(.param .u64 address, .param .u32 value, .param .u32 compare) {
  .reg .u64 %a;
  .reg .u32 %v, %c, %x, %t;
  .reg .pred %p, %q;
  ld.param.u64 %a, [address];
  ld.param.u32 %v, [value];
  ld.param.u32 %c, [compare];
$Lpoll:
  ld.volatile.global.u32 %x, [%a];
  sub.s32 %t, %x, %v;
  setp.ge.s32 %p, %t, 0;
  setp.eq.u32 %q, %c, 1;
  @%q setp.eq.u32 %p, %x, %v;
  setp.eq.u32 %q, %c, 2;
  and.b32 %t, %x, %v;
  @%q setp.ne.u32 %p, %t, 0;
  setp.eq.u32 %q, %c, 3;
  or.b32 %t, %x, %v;
  not.b32 %t, %t;
  @%q setp.ne.u32 %p, %t, 0;
  @%p bra $Ldone;
  nanosleep.u32 256;
  bra $Lpoll;
$Ldone:
  membar.sys;
  ret;
}

.visible .entry tally_wait64(.param .u64 address, .param .u64 value, .param .u32 compare) {
  .reg .u64 %a, %v, %x, %t;
  .reg .u32 %c;
  .reg .pred %p, %q;
  ld.param.u64 %a, [address];
  ld.param.u64 %v, [value];
  ld.param.u32 %c, [compare];
$Lpoll:
  ld.volatile.global.u64 %x, [%a];
  sub.s64 %t, %x, %v;
  setp.ge.s64 %p, %t, 0;
  setp.eq.u32 %q, %c, 1;
  @%q setp.eq.u64 %p, %x, %v;
  setp.eq.u32 %q, %c, 2;
  and.b64 %t, %x, %v;
  @%q setp.ne.u64 %p, %t, 0;
  setp.eq.u32 %q, %c, 3;
  or.b64 %t, %x, %v;
  not.b64 %t, %t;
  @%q setp.ne.u64 %p, %t, 0;
  @%p bra $Ldone;
  nanosleep.u32 256;
  bra $Lpoll;
$Ldone:
  membar.sys;
  ret;
}
)";

}  // namespace

bool MemOpKernels::load(std::string& error) {
  if (CUresult r = cuModuleLoadData(&module_, kMemOpPtx); r != CUDA_SUCCESS) {
    error = "cannot load the stream memory operation kernels: CUresult " + std::to_string(r);
    return false;
  }
  struct Named {
    CUfunction* out;
    const char* name;
  };
  for (Named n : {Named{&write32_, "tally_write32"}, Named{&write64_, "tally_write64"}, Named{&wait32_, "tally_wait32"},
                  Named{&wait64_, "tally_wait64"}}) {
    if (CUresult r = cuModuleGetFunction(n.out, module_, n.name); r != CUDA_SUCCESS) {
      error = std::string("stream memory operation kernels have no ") + n.name + ": CUresult " + std::to_string(r);
      return false;
    }
  }
  return true;
}

CUresult MemOpKernels::write(CUstream stream, CUdeviceptr address, uint64_t value, unsigned bits) const {
  uint32_t value32 = static_cast<uint32_t>(value);
  void* args[] = {&address, bits == 32 ? static_cast<void*>(&value32) : static_cast<void*>(&value)};
  return cuLaunchKernel(bits == 32 ? write32_ : write64_, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr);
}

CUresult MemOpKernels::wait(CUstream stream, CUdeviceptr address, uint64_t value, unsigned bits, unsigned flags) const {
  uint32_t value32 = static_cast<uint32_t>(value);
  uint32_t compare = flags & 3u;
  void* args[] = {&address, bits == 32 ? static_cast<void*>(&value32) : static_cast<void*>(&value), &compare};
  return cuLaunchKernel(bits == 32 ? wait32_ : wait64_, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr);
}

MemOpKernels::~MemOpKernels() {
  if (module_ != nullptr) cuModuleUnload(module_);
}

bool isPoolMemory(CUdeviceptr address) {
  CUmemoryPool pool = nullptr;
  return cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, address) == CUDA_SUCCESS && pool != nullptr;
}

}  // namespace tally::server::gpu
