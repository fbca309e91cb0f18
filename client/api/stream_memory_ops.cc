// Stream memory operations: cuStreamWaitValue32/64, cuStreamWriteValue32/64 and
// cuStreamBatchMemOp, in every exported version (the CUDA 8/9 ones, the _v2 of CUDA 11.7, and
// the _ptsz twins). One-way like a memset: tallyd runs them on the tenant's stream once it has
// checked that every word is the tenant's memory, and a refusal surfaces at the next
// synchronizing call. What the driver refuses at the call itself (unknown operations or flags,
// a null or misaligned word, too many operations) is refused here, before anything is sent.
#include "client/api/api_util.h"
#include "client/runtime/argument_checks.h"
#include "common/stream/stream_mem_ops.h"

#include <span>
#include <vector>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

struct MemOp {
  uint32_t operation;  // CUstreamBatchMemOpType
  CUdeviceptr address;
  uint64_t value;
  uint32_t flags;
};

CUresult postMemOps(CUstream stream, std::span<const MemOp> ops) {
  for (const MemOp& op : ops) {
    if (!tally::stream::memOpWellFormed(op.operation, op.flags, op.address)) return CUDA_ERROR_INVALID_VALUE;
    // As the driver: no memory operation on a word of stream-ordered (pool) memory.
    if (auto region = rt().findDeviceRegion(op.address); region && region->second.streamOrdered) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  uint64_t streamId = rt().streamId(stream);
  if (streamId == 0) return CUDA_ERROR_INVALID_HANDLE;
  return rt().post([&](wire::Call::Builder c) {
    auto m = c.initStreamMemOps();
    m.setStream(streamId);
    auto list = m.initOps(static_cast<unsigned>(ops.size()));
    for (unsigned i = 0; i < ops.size(); ++i) {
      list[i].setOperation(ops[i].operation);
      list[i].setAddress(ops[i].address);
      list[i].setValue(ops[i].value);
      list[i].setFlags(ops[i].flags);
    }
  });
}

CUresult memOp(CUstream stream, CUstreamBatchMemOpType operation, CUdeviceptr address, uint64_t value, unsigned flags) {
  MemOp op{static_cast<uint32_t>(operation), address, value, flags};
  return postMemOps(stream, std::span<const MemOp>(&op, 1));
}

MemOp fromParams(const CUstreamBatchMemOpParams& p) {
  auto operation = static_cast<uint32_t>(p.operation);
  switch (p.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32: return {operation, p.waitValue.address, p.waitValue.value, p.waitValue.flags};
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: return {operation, p.waitValue.address, p.waitValue.value64, p.waitValue.flags};
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      return {operation, p.writeValue.address, p.writeValue.value, p.writeValue.flags};
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      return {operation, p.writeValue.address, p.writeValue.value64, p.writeValue.flags};
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES: return {operation, 0, 0, p.flushRemoteWrites.flags};
    default: return {operation, 0, 0, p.memoryBarrier.flags};  // a barrier, or unknown (refused)
  }
}

CUresult batchMemOps(CUstream stream, unsigned count, const CUstreamBatchMemOpParams* params, unsigned flags) {
  if (flags != 0 || count > tally::stream::kMaxBatchMemOps || (count != 0 && params == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (count == 0) return CUDA_SUCCESS;
  size_t bytes = count * sizeof(CUstreamBatchMemOpParams);
  if (CUresult r = checkHostRows(reinterpret_cast<uint64_t>(params), bytes, bytes, 1, HostAccess::kRead);
      r != CUDA_SUCCESS) {
    return r;
  }
  std::vector<MemOp> ops;
  ops.reserve(count);
  for (unsigned i = 0; i < count; ++i) ops.push_back(fromParams(params[i]));
  return postMemOps(stream, ops);
}

}  // namespace

// cuda.h renames these to their _v2 exports (CUDA 11.7); the signatures did not change.
TALLY_API CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return guardDriver(__func__, [&] { return memOp(stream, CU_STREAM_MEM_OP_WAIT_VALUE_32, addr, value, flags); });
}
TALLY_API CUresult cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return guardDriver(__func__, [&] { return memOp(stream, CU_STREAM_MEM_OP_WAIT_VALUE_64, addr, value, flags); });
}
TALLY_API CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return guardDriver(__func__, [&] { return memOp(stream, CU_STREAM_MEM_OP_WRITE_VALUE_32, addr, value, flags); });
}
TALLY_API CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return guardDriver(__func__, [&] { return memOp(stream, CU_STREAM_MEM_OP_WRITE_VALUE_64, addr, value, flags); });
}
TALLY_API CUresult cuStreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                                      unsigned int flags) {
  return guardDriver(__func__, [&] { return batchMemOps(stream, count, paramArray, flags); });
}

// The per-thread-default-stream twins: a null stream is the calling thread's default stream.
TALLY_API CUresult cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return cuStreamWaitValue32_v2(perThreadDefault(stream), addr, value, flags);
}
TALLY_API CUresult cuStreamWaitValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return cuStreamWaitValue64_v2(perThreadDefault(stream), addr, value, flags);
}
TALLY_API CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return cuStreamWriteValue32_v2(perThreadDefault(stream), addr, value, flags);
}
TALLY_API CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return cuStreamWriteValue64_v2(perThreadDefault(stream), addr, value, flags);
}
TALLY_API CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                                              unsigned int flags) {
  return cuStreamBatchMemOp_v2(perThreadDefault(stream), count, paramArray, flags);
}

// The CUDA 8/9 exports that binaries built against older headers import (no #define renames
// them there); cuda.h declares them only for the driver's own build. Same ABI as the _v2 ones,
// so they are aliases of them.
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp
#define TALLY_SAME_AS(target) TALLY_API __attribute__((alias(#target)))

TALLY_SAME_AS(cuStreamWaitValue32_v2) CUresult cuStreamWaitValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
TALLY_SAME_AS(cuStreamWaitValue64_v2) CUresult cuStreamWaitValue64(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
TALLY_SAME_AS(cuStreamWriteValue32_v2) CUresult cuStreamWriteValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
TALLY_SAME_AS(cuStreamWriteValue64_v2) CUresult cuStreamWriteValue64(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
TALLY_SAME_AS(cuStreamBatchMemOp_v2) CUresult cuStreamBatchMemOp(CUstream, unsigned int, CUstreamBatchMemOpParams*,
                                                                  unsigned int);
TALLY_SAME_AS(cuStreamWaitValue32_v2_ptsz)
CUresult cuStreamWaitValue32_ptsz(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
TALLY_SAME_AS(cuStreamWaitValue64_v2_ptsz)
CUresult cuStreamWaitValue64_ptsz(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
TALLY_SAME_AS(cuStreamWriteValue32_v2_ptsz)
CUresult cuStreamWriteValue32_ptsz(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
TALLY_SAME_AS(cuStreamWriteValue64_v2_ptsz)
CUresult cuStreamWriteValue64_ptsz(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
TALLY_SAME_AS(cuStreamBatchMemOp_v2_ptsz)
CUresult cuStreamBatchMemOp_ptsz(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);

#undef TALLY_SAME_AS
