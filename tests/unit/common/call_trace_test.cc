// The call trace (common/trace/call_trace.h): off until enabled, then one tab-separated line per
// event with the tenant, call id, kind, stage and a monotonic timestamp, in recording order.
#include "common/trace/call_trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tally::trace {
namespace {

std::vector<std::vector<std::string>> readLines(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, '\t');) fields.push_back(f);
    rows.push_back(fields);
  }
  return rows;
}

TEST(CallTrace, RecordsNothingUntilEnabledThenEveryEventInOrder) {
  std::string path = ::testing::TempDir() + "call_trace_" + std::to_string(::getpid()) + ".tsv";
  std::remove(path.c_str());
  EXPECT_FALSE(callTraceEnabled());
  recordCall(1, 2, 3, Stage::kSend);  // dropped: not enabled yet

  ASSERT_TRUE(enableCallTrace(path, "client"));
  EXPECT_TRUE(callTraceEnabled());
  recordCall(7, 42, 19, Stage::kSend);
  recordCall(7, 42, 19, Stage::kSent);
  recordCall(7, 42, -1, Stage::kReplied);
  recordCall(7, 42, 19, Stage::kWoken);
  flushCallTrace();

  auto rows = readLines(path);
  ASSERT_EQ(rows.size(), 4u);
  const char* stages[] = {"send", "sent", "replied", "woken"};
  uint64_t previous = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 6u);
    EXPECT_EQ(rows[i][0], "client");
    EXPECT_EQ(rows[i][1], "7");
    EXPECT_EQ(rows[i][2], "42");
    EXPECT_EQ(rows[i][4], stages[i]);
    uint64_t ns = std::stoull(rows[i][5]);
    EXPECT_GE(ns, previous);  // monotonic
    previous = ns;
  }
  EXPECT_EQ(rows[2][3], "-1");
  std::remove(path.c_str());
}

// Past one buffer (4,096 events) the writer thread writes the full ones; the flush at exit writes
// the rest. Nothing is lost or reordered, from several recording threads either.
TEST(CallTrace, ManyEventsFromSeveralThreadsAreAllWrittenInEachThreadsOrder) {
  std::string path = ::testing::TempDir() + "call_trace_many_" + std::to_string(::getpid()) + ".tsv";
  std::remove(path.c_str());
  ASSERT_TRUE(enableCallTrace(path, "tallyd"));
  constexpr uint64_t kThreads = 3, kEach = 10000;
  std::vector<std::thread> threads;
  for (uint64_t t = 1; t <= kThreads; ++t) {
    threads.emplace_back([t] {
      for (uint64_t id = 1; id <= kEach; ++id) recordCall(t, id, 27, Stage::kRead);
    });
  }
  for (auto& thread : threads) thread.join();
  flushCallTrace();

  auto rows = readLines(path);
  ASSERT_EQ(rows.size(), kThreads * kEach);
  std::vector<uint64_t> last(kThreads + 1, 0);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 6u);
    uint64_t tenant = std::stoull(row[1]), id = std::stoull(row[2]);
    ASSERT_GE(tenant, 1u);
    ASSERT_LE(tenant, kThreads);
    EXPECT_EQ(id, last[tenant] + 1) << "tenant " << tenant;
    last[tenant] = id;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tally::trace
