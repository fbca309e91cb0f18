// CUDA_VISIBLE_DEVICES for a tenant: the client sends the variable as the application has it,
// and its tenant sees only those of tallyd's GPUs, in that order, numbered from 0 — as a process
// on the GPU host would. Entries are ordinals or GPU UUIDs ("GPU-" and any unique prefix of the
// hex digits, dashes ignored); as in CUDA, the list ends at the first entry that names no GPU,
// and an entry that names a GPU already named makes the whole variable invalid (measured on the
// H200: "0,0" gives cudaErrorInvalidDevice, "0,5,0" one GPU).
#pragma once

#include <string>
#include <vector>

namespace tally::server::session {

// `uuids[i]`: the 16 bytes of tallyd's GPU i. Returns the GPUs the entries select, in order;
// `repeated` (if given) says whether an entry named a GPU twice (then the selection is invalid).
std::vector<size_t> visibleDevices(const std::vector<std::string>& entries, const std::vector<std::string>& uuids,
                                   bool* repeated = nullptr);

}  // namespace tally::server::session
