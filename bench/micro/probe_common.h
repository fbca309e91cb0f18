// What the driver probes of bench/micro share: a check that ends the probe on the first failed
// CUDA call (runtime or driver: both are 0 on success), and a kernel that runs for a set time.
#pragma once

#include <cstdio>
#include <cstdlib>

#define PROBE_CHECK(x)                                                        \
  do {                                                                        \
    auto status_ = (x);                                                       \
    if (static_cast<int>(status_) != 0) {                                     \
      std::fprintf(stderr, "%s failed: %d\n", #x, static_cast<int>(status_)); \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)

// Spins `nanos` of GPU time (%globaltimer), whatever the SM's clock. Defined here: include this
// header from one file per probe (each probe is one program).
__global__ void spinNanos(unsigned nanos) {
  unsigned long long start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (unsigned long long now = start; now - start < nanos;) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
}
