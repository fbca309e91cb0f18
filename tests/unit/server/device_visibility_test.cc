// CUDA_VISIBLE_DEVICES as tallyd applies it to a tenant (server/session/device_visibility.h):
// ordinals and UUID prefixes select and reorder GPUs; the list ends at the first entry that names
// no GPU, an ambiguous prefix, or a GPU already named — as CUDA does in a process.
#include "server/session/device_visibility.h"

#include <gtest/gtest.h>

namespace tally::server::session {
namespace {

std::string uuid(unsigned char first, unsigned char second) {
  std::string u(16, '\0');
  u[0] = static_cast<char>(first);
  u[1] = static_cast<char>(second);
  return u;
}

const std::vector<std::string> kUuids = {uuid(0xab, 0x01), uuid(0xab, 0x02), uuid(0xcd, 0x00)};

TEST(DeviceVisibility, OrdinalsSelectAndReorder) {
  EXPECT_EQ(visibleDevices({"1"}, kUuids), (std::vector<size_t>{1}));
  EXPECT_EQ(visibleDevices({"2", "0"}, kUuids), (std::vector<size_t>{2, 0}));
  EXPECT_EQ(visibleDevices({" 1 "}, kUuids), (std::vector<size_t>{1}));
}

TEST(DeviceVisibility, UuidPrefixesMatchWhenUnique) {
  EXPECT_EQ(visibleDevices({"GPU-cd"}, kUuids), (std::vector<size_t>{2}));
  EXPECT_EQ(visibleDevices({"GPU-ab02"}, kUuids), (std::vector<size_t>{1}));
  EXPECT_EQ(visibleDevices({"GPU-AB-01"}, kUuids), (std::vector<size_t>{0}));  // case and dashes
  EXPECT_TRUE(visibleDevices({"GPU-ab"}, kUuids).empty());                     // two GPUs match
}

TEST(DeviceVisibility, TheListEndsAtTheFirstEntryThatNamesNoNewGpu) {
  EXPECT_EQ(visibleDevices({"0", "7", "1"}, kUuids), (std::vector<size_t>{0}));
  bool repeated = true;
  EXPECT_EQ(visibleDevices({"0", "7", "0"}, kUuids, &repeated), (std::vector<size_t>{0}));
  EXPECT_FALSE(repeated);  // the list ended before the second "0"
  visibleDevices({"1", "2", "GPU-ab02"}, kUuids, &repeated);
  EXPECT_TRUE(repeated);  // natively the whole variable is then invalid (cudaErrorInvalidDevice)
  EXPECT_EQ(visibleDevices({"2", "MIG-abc"}, kUuids), (std::vector<size_t>{2}));
  EXPECT_TRUE(visibleDevices({""}, kUuids).empty());  // CUDA_VISIBLE_DEVICES="": no GPU
  EXPECT_TRUE(visibleDevices({"-1"}, kUuids).empty());
  EXPECT_TRUE(visibleDevices({"99999999999"}, kUuids).empty());
}

}  // namespace
}  // namespace tally::server::session
