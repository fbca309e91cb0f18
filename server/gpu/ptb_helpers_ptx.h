// The PTX of the PTB helper kernels (variant_launch.h: PtbHelpers), loaded by tallyd into each
// GPU's context at startup and checked with ptxas by the transform tests.
#pragma once

namespace tally::server::gpu {

// retreat_at(progress*, retreat*, threshold, timeout_ns): spins on the progress counter (volatile:
// another kernel writes it) until it reaches the threshold or the %globaltimer deadline passes,
// then raises the flag.
inline constexpr const char* kPtbHelpersPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry tally_retreat_at(.param .u64 progress, .param .u64 retreat, .param .u64 threshold,
                                 .param .u64 timeout_ns)
{
  .reg .pred %p<3>;
  .reg .b32 %r<2>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [progress];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd2, [retreat];
  cvta.to.global.u64 %rd2, %rd2;
  ld.param.u64 %rd3, [threshold];
  ld.param.u64 %rd4, [timeout_ns];
  mov.u64 %rd5, %globaltimer;
  add.u64 %rd4, %rd4, %rd5;
$spin:
  ld.volatile.global.u64 %rd6, [%rd1];
  setp.ge.u64 %p1, %rd6, %rd3;
  @%p1 bra $raise;
  mov.u64 %rd5, %globaltimer;
  setp.lt.u64 %p2, %rd5, %rd4;
  @%p2 bra $spin;
$raise:
  mov.u32 %r1, 1;
  st.volatile.global.u32 [%rd2], %r1;
  ret;
}

// ptb_pause(retreat*, progress*, total, timeout_ns): between two runs of a PTB kernel on one
// stream: waits while the retreat flag is up and the grid is unfinished, at most timeout_ns,
// polling every microsecond (the flag may be mapped host memory).
.visible .entry tally_ptb_pause(.param .u64 retreat, .param .u64 progress, .param .u64 total,
                                .param .u64 timeout_ns)
{
  .reg .pred %p<4>;
  .reg .b32 %r<2>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [retreat];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd2, [progress];
  cvta.to.global.u64 %rd2, %rd2;
  ld.param.u64 %rd3, [total];
  ld.param.u64 %rd4, [timeout_ns];
  mov.u64 %rd5, %globaltimer;
  add.u64 %rd4, %rd4, %rd5;
$wait:
  ld.volatile.global.u32 %r1, [%rd1];
  setp.eq.u32 %p1, %r1, 0;
  @%p1 bra $done;
  ld.volatile.global.u64 %rd6, [%rd2];
  setp.ge.u64 %p2, %rd6, %rd3;
  @%p2 bra $done;
  mov.u64 %rd5, %globaltimer;
  setp.ge.u64 %p3, %rd5, %rd4;
  @%p3 bra $done;
  nanosleep.u32 1000;
  bra $wait;
$done:
  ret;
}
)";

}  // namespace tally::server::gpu
