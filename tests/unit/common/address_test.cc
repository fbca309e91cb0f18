#include "common/address/address.h"

#include <gtest/gtest.h>

namespace tally::address {
namespace {

TEST(Endpoint, ParsesUnixAndTcp) {
  std::string error;
  auto u = parseEndpoint("unix:/run/tally/tallyd.sock", error);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->kind, Endpoint::Kind::kUnix);
  EXPECT_EQ(u->path, "/run/tally/tallyd.sock");
  EXPECT_EQ(u->toString(), "unix:/run/tally/tallyd.sock");
  auto t = parseEndpoint("tcp://127.0.0.1:7077", error);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 7077);
  auto v6 = parseEndpoint("tcp://[::1]:80", error);
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
}

TEST(Endpoint, RefusesMalformedWithAReason) {
  for (const char* bad : {"", "unix:", "tcp://host", "tcp://:5", "tcp://h:99999", "tcp://h:12x", "http://x:1"}) {
    std::string error;
    EXPECT_FALSE(parseEndpoint(bad, error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

TEST(Connect, NamesTheFailureWhenNothingListens) {
  std::string error;
  auto e = parseEndpoint("unix:/tmp/tally-test-nobody-listens.sock", error);
  ASSERT_TRUE(e);
  EXPECT_EQ(connectTo(*e, 500, error), -1);
  EXPECT_FALSE(error.empty());
}

}  // namespace
}  // namespace tally::address
