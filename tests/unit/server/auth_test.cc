#include "server/session/auth.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

namespace tally::server::session {
namespace {

constexpr size_t kMax = std::numeric_limits<size_t>::max();

std::span<const uint8_t> bytes(const char* text) {
  return {reinterpret_cast<const uint8_t*>(text), std::strlen(text)};
}

TenantRule tokenRule(const char* name, const char* token) {
  TenantRule rule;
  rule.name = name;
  rule.tokenSha256 = sha256(bytes(token));
  return rule;
}

TEST(Quota, ZeroMeansUnlimited) {
  EXPECT_TRUE(withinQuota(0, 0, 0));
  EXPECT_TRUE(withinQuota(kMax, kMax, 0));
}

TEST(Quota, ExactFitIsAllowedOneMoreIsNot) {
  EXPECT_TRUE(withinQuota(0, 100, 100));
  EXPECT_TRUE(withinQuota(60, 40, 100));
  EXPECT_FALSE(withinQuota(60, 41, 100));
  EXPECT_FALSE(withinQuota(0, 101, 100));
}

TEST(Quota, NoOverflow) {
  EXPECT_FALSE(withinQuota(10, kMax, 100));
  EXPECT_FALSE(withinQuota(kMax, 1, kMax - 1));
  EXPECT_TRUE(withinQuota(kMax - 1, 1, kMax));
  EXPECT_FALSE(withinQuota(kMax, 1, kMax));
  EXPECT_FALSE(withinQuota(200, 0, 100));  // already over (quota lowered): nothing more
}

TEST(Quota, StreamLimit) {
  EXPECT_TRUE(withinStreamLimit(1000, 0));
  EXPECT_TRUE(withinStreamLimit(0, 1));
  EXPECT_FALSE(withinStreamLimit(1, 1));
  EXPECT_TRUE(withinStreamLimit(3, 4));
  EXPECT_FALSE(withinStreamLimit(4, 4));
}

TEST(Quota, PitchedUpperBound) {
  EXPECT_EQ(pitchedBytesUpperBound(1, 1), kPitchAlignment);
  EXPECT_EQ(pitchedBytesUpperBound(512, 3), 512u * 3);
  EXPECT_EQ(pitchedBytesUpperBound(513, 2), 1024u * 2);
  EXPECT_EQ(pitchedBytesUpperBound(100, 0), 0u);
  EXPECT_EQ(pitchedBytesUpperBound(kMax, 1), kMax);
  EXPECT_EQ(pitchedBytesUpperBound(1024, kMax), kMax);
}

TEST(Sha256, KnownDigestAndHexParsing) {
  // printf '%s' abc | sha256sum
  Sha256 expected{};
  ASSERT_TRUE(parseSha256Hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", expected));
  EXPECT_EQ(sha256(bytes("abc")), expected);
  Sha256 upper{};
  ASSERT_TRUE(parseSha256Hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", upper));
  EXPECT_EQ(upper, expected);
  Sha256 ignored{};
  EXPECT_FALSE(parseSha256Hex("ba7816bf", ignored));
  EXPECT_FALSE(parseSha256Hex(std::string(64, 'g'), ignored));
  EXPECT_FALSE(parseSha256Hex(std::string(66, 'a'), ignored));
}

TEST(Authenticate, NoRulesKeepsTodaysBehaviour) {
  AuthPolicy policy;
  EXPECT_TRUE(authenticate(policy, {}, std::nullopt).error.empty());
  EXPECT_TRUE(authenticate(policy, bytes("whatever"), 1000).error.empty());
  EXPECT_EQ(authenticate(policy, bytes("whatever"), 1000).rule, nullptr);
}

TEST(Authenticate, TokenMatchesItsRule) {
  AuthPolicy policy;
  policy.tenants = {tokenRule("alice", "secret-a"), tokenRule("bob", "secret-b")};
  AuthResult r = authenticate(policy, bytes("secret-b"), std::nullopt);
  ASSERT_NE(r.rule, nullptr);
  EXPECT_EQ(r.rule->name, "bob");
  EXPECT_EQ(authenticate(policy, bytes("secret-c"), std::nullopt).error, "unknown token");
}

TEST(Authenticate, MissingTokenWithRequireAuth) {
  AuthPolicy policy;
  policy.tenants = {tokenRule("alice", "secret-a")};
  EXPECT_TRUE(authenticate(policy, {}, 1000).error.empty());  // anonymous allowed
  policy.requireAuth = true;
  EXPECT_NE(authenticate(policy, {}, 1000).error.find("authentication required"), std::string::npos);
  EXPECT_NE(authenticate(policy, {}, std::nullopt).error.find("authentication required"), std::string::npos);
}

TEST(Authenticate, UidRule) {
  AuthPolicy policy;
  policy.requireAuth = true;
  TenantRule rule;
  rule.name = "local";
  rule.unixUid = 1234;
  policy.tenants = {rule};
  AuthResult r = authenticate(policy, {}, 1234);
  ASSERT_NE(r.rule, nullptr);
  EXPECT_EQ(r.rule->name, "local");
  EXPECT_FALSE(authenticate(policy, {}, 1235).error.empty());
  EXPECT_FALSE(authenticate(policy, {}, std::nullopt).error.empty());  // TCP has no uid
}

TEST(Authenticate, TokenAndUidMustBothMatch) {
  AuthPolicy policy;
  TenantRule rule = tokenRule("both", "t");
  rule.unixUid = 42;
  policy.tenants = {rule};
  EXPECT_NE(authenticate(policy, bytes("t"), 42).rule, nullptr);
  EXPECT_EQ(authenticate(policy, bytes("t"), 43).error, "unknown token");
  EXPECT_EQ(authenticate(policy, bytes("t"), std::nullopt).error, "unknown token");
}

// Finding 13: without require_auth, a local user held to a unix_uid rule must not escape it by
// connecting over loopback TCP anonymously.
TEST(Authenticate, UidRulesRefuseTcpPeersWithoutATokenEvenWithoutRequireAuth) {
  AuthPolicy policy;
  TenantRule local;
  local.name = "local";
  local.unixUid = 1234;
  local.allowedPriority = AllowedPriority::kBestEffort;
  policy.tenants = {local, tokenRule("remote", "secret")};
  AuthResult tcp = authenticate(policy, {}, std::nullopt);
  EXPECT_EQ(tcp.rule, nullptr);
  EXPECT_NE(tcp.error.find("unix_uid"), std::string::npos) << tcp.error;
  EXPECT_NE(authenticate(policy, bytes("secret"), std::nullopt).rule, nullptr);  // a token still works
  EXPECT_EQ(authenticate(policy, {}, 1234).rule->name, "local");                 // the uid over the socket
  EXPECT_TRUE(authenticate(policy, {}, 999).error.empty());  // another local user: anonymous, as before
}

TEST(Authenticate, WithoutUidRulesAnonymousTcpPeersAreStillAdmitted) {
  AuthPolicy policy;
  policy.tenants = {tokenRule("remote", "secret")};
  AuthResult r = authenticate(policy, {}, std::nullopt);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.rule, nullptr);
}

TEST(Priority, AnonymousTcpPeersAreBestEffortUnlessAllowed) {
  AuthPolicy policy;
  PriorityDecision tcpHigh = decideAnonymousPriority(policy, false, PriorityClass::kHigh);
  EXPECT_NE(tcpHigh.error.find("allow_anonymous_high_priority"), std::string::npos) << tcpHigh.error;
  EXPECT_TRUE(decideAnonymousPriority(policy, false, PriorityClass::kBestEffort).error.empty());
  PriorityDecision unixHigh = decideAnonymousPriority(policy, true, PriorityClass::kHigh);
  EXPECT_TRUE(unixHigh.error.empty());  // the socket's permissions decide who gets that far
  EXPECT_EQ(unixHigh.granted, PriorityClass::kHigh);
  policy.allowAnonymousHighPriority = true;
  PriorityDecision allowed = decideAnonymousPriority(policy, false, PriorityClass::kHigh);
  EXPECT_TRUE(allowed.error.empty());
  EXPECT_EQ(allowed.granted, PriorityClass::kHigh);
}

TEST(Priority, RulesAndCap) {
  TenantRule rule;
  rule.name = "batch";
  rule.allowedPriority = AllowedPriority::kBestEffort;
  PriorityDecision refused = decidePriority(rule, PriorityClass::kHigh);
  EXPECT_EQ(refused.error, "tenant batch may not request high priority");
  EXPECT_TRUE(decidePriority(rule, PriorityClass::kBestEffort).error.empty());
  rule.capPriority = true;
  PriorityDecision capped = decidePriority(rule, PriorityClass::kHigh);
  EXPECT_TRUE(capped.error.empty());
  EXPECT_TRUE(capped.capped);
  EXPECT_EQ(capped.granted, PriorityClass::kBestEffort);
  for (AllowedPriority allowed : {AllowedPriority::kHigh, AllowedPriority::kAny}) {
    rule.allowedPriority = allowed;
    PriorityDecision d = decidePriority(rule, PriorityClass::kHigh);
    EXPECT_TRUE(d.error.empty());
    EXPECT_EQ(d.granted, PriorityClass::kHigh);
  }
}

}  // namespace
}  // namespace tally::server::session

namespace tally::server::session {
namespace {

TEST(Authenticate, TlsSubjectRule) {
  AuthPolicy policy;
  policy.requireAuth = true;
  TenantRule subject;
  subject.name = "inference";
  subject.tlsSubject = "CN=inference-1";
  TenantRule both = tokenRule("training", "secret-t");
  both.tlsSubject = "CN=trainer";
  policy.tenants = {subject, both};
  AuthResult r = authenticate(policy, {}, std::nullopt, "CN=inference-1");
  ASSERT_NE(r.rule, nullptr);
  EXPECT_EQ(r.rule->name, "inference");
  // Another certificate, or none (a Unix or plain TCP peer), matches nothing.
  EXPECT_NE(authenticate(policy, {}, std::nullopt, "CN=someone-else").error.find("no tls_subject rule matches"),
            std::string::npos);
  EXPECT_EQ(authenticate(policy, {}, 0).rule, nullptr);
  // Token and subject: both must match.
  EXPECT_EQ(authenticate(policy, bytes("secret-t"), std::nullopt, "CN=trainer").rule->name, "training");
  EXPECT_EQ(authenticate(policy, bytes("secret-t"), std::nullopt, "CN=inference-1").error, "unknown token");
  EXPECT_EQ(authenticate(policy, bytes("secret-t"), std::nullopt).error, "unknown token");
}

}  // namespace
}  // namespace tally::server::session
