// How the GPU equivalence test launches each corpus kernel (tests/transform/corpus): launch
// shape, scalar values, and which kernels cannot be compared bitwise. A kernel without an entry
// gets the defaults; parameters are filled from their PTX types (parameter_fill.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace tally::test {

struct KernelSpec {
  uint32_t grid[3] = {512, 1, 1};
  uint32_t block[3] = {128, 1, 1};
  uint32_t sharedMem = 4096;
  int64_t intValue = 4096;  // every integer scalar parameter (n, w, h, iters ...)
  // A 64-bit parameter that is a count, not a pointer (size_t n): index -> value.
  std::map<int, uint64_t> countParams;
  // Struct parameter index -> byte offset inside it that holds a pointer to a buffer.
  std::map<int, uint32_t> pointerInStruct;
  // Why the output cannot be compared bitwise (the kernel races across blocks or reads the
  // clock); such kernels are run through every variant and must finish without error.
  std::string nondeterministic;
  // Bench only: grid x at a realistic size (0: the test's grid x times 64).
  uint32_t benchGridX = 0;
};

// Designated initializers leave the other fields at their defaults, which is the point.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
inline std::map<std::string, KernelSpec> kernelSpecs() {
  std::map<std::string, KernelSpec> s;
  s["k_2d"] = {.grid = {16, 64, 1}, .block = {32, 4, 1}, .intValue = 512, .benchGridX = 128};
  s["k_3d"] = {.grid = {16, 8, 8}, .block = {8, 4, 2}, .intValue = 128, .benchGridX = 16};
  s["k_grid_stride"] = {.countParams = {{1, 1u << 20}}, .benchGridX = 4096};
  s["k_grid_stride_2d"] = {.grid = {8, 4, 1}, .intValue = 512, .benchGridX = 64};
  s["k_grid_dims_out"] = {.grid = {8, 4, 3}};
  s["k_block_id_64"] = {.grid = {8, 4, 3}, .nondeterministic = "blocks of different z store to one element"};
  s["k_atomics"] = {.nondeterministic = "atomicCAS/atomicExch winners depend on block order"};
  s["k_mixed_struct"] = {.pointerInStruct = {{0, 24}}};
  s["k_switch"] = {.nondeterministic = "reads elements other blocks write"};
  s["k_launch_bounds"] = {.block = {256, 1, 1}};
  s["s_static_shared"] = {.block = {256, 1, 1}};
  s["s_dynamic_shared"] = {.intValue = 128};
  s["s_dynamic_shared_2"] = {.grid = {1, 512, 1}};
  s["s_sync_in_loop"] = {.intValue = 16};
  s["s_block_exit"] = {.block = {64, 1, 1}};
  s["s_warp_reduce"] = {.grid = {64, 2, 4}};
  s["s_printf"] = {.grid = {2, 1, 1}, .block = {32, 1, 1}, .nondeterministic = "prints", .benchGridX = 2};
  s["s_printf_float"] = {.grid = {1, 2, 1}, .block = {2, 1, 1}, .nondeterministic = "prints", .benchGridX = 1};
  s["s_clock"] = {.nondeterministic = "stores clock64() differences"};
  s["i_block_group_ok"] = {.nondeterministic = "reads an element other blocks write"};
  return s;
}
#pragma GCC diagnostic pop

inline KernelSpec specFor(const std::string& kernel) {
  static const std::map<std::string, KernelSpec> specs = kernelSpecs();
  auto it = specs.find(kernel);
  return it == specs.end() ? KernelSpec{} : it->second;
}

}  // namespace tally::test
