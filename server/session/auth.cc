#include "server/session/auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>

#include <limits>
#include <stdexcept>

namespace tally::server::session {

namespace {

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool tokenMatches(const TenantRule& rule, const Sha256& digest) {
  return rule.tokenSha256 && CRYPTO_memcmp(rule.tokenSha256->data(), digest.data(), digest.size()) == 0;
}

// The peer identities other than the token: each one a rule sets must match.
bool identityMatches(const TenantRule& rule, std::optional<uint32_t> unixUid, std::string_view tlsSubject) {
  bool uid = !rule.unixUid || (unixUid && *rule.unixUid == *unixUid);
  bool subject = !rule.tlsSubject || (!tlsSubject.empty() && *rule.tlsSubject == tlsSubject);
  return uid && subject;
}

// Every rule is examined (no early exit), so the time taken does not tell which one matched.
const TenantRule* matchToken(const AuthPolicy& policy, const Sha256& digest, std::optional<uint32_t> unixUid,
                             std::string_view tlsSubject) {
  const TenantRule* found = nullptr;
  for (const TenantRule& rule : policy.tenants) {
    bool match = tokenMatches(rule, digest) && identityMatches(rule, unixUid, tlsSubject);
    if (match && found == nullptr) found = &rule;
  }
  return found;
}

// Rules without a token: the Unix uid and/or the certificate subject alone identify the peer.
const TenantRule* matchIdentity(const AuthPolicy& policy, std::optional<uint32_t> unixUid, std::string_view tlsSubject) {
  for (const TenantRule& rule : policy.tenants) {
    if (!rule.tokenSha256 && (rule.unixUid || rule.tlsSubject) && identityMatches(rule, unixUid, tlsSubject)) {
      return &rule;
    }
  }
  return nullptr;
}

bool hasUidRule(const AuthPolicy& policy) {
  for (const TenantRule& rule : policy.tenants) {
    if (rule.unixUid) return true;
  }
  return false;
}

}  // namespace

bool parseSha256Hex(std::string_view hex, Sha256& out) {
  if (hex.size() != 2 * out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    int high = hexDigit(hex[2 * i]);
    int low = hexDigit(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<uint8_t>(high << 4 | low);
  }
  return true;
}

Sha256 sha256(std::span<const uint8_t> bytes) { return hash::sha256(bytes.data(), bytes.size()); }

AuthResult authenticate(const AuthPolicy& policy, std::span<const uint8_t> token, std::optional<uint32_t> unixUid,
                        std::string_view tlsSubject) {
  if (!token.empty()) {
    // With no rules at all a token means nothing (tallyd before authentication existed).
    if (policy.tenants.empty() && !policy.requireAuth) return {};
    if (const TenantRule* rule = matchToken(policy, sha256(token), unixUid, tlsSubject)) return {rule, {}};
    return {nullptr, "unknown token"};
  }
  if (const TenantRule* rule = matchIdentity(policy, unixUid, tlsSubject)) return {rule, {}};
  if (!unixUid && hasUidRule(policy)) {
    return {nullptr, "authentication required: this tallyd identifies local users by unix_uid, which a TCP peer "
                     "does not have; connect over the Unix socket or send a token (TALLY_TOKEN)"};
  }
  if (!policy.requireAuth) return {};
  if (!tlsSubject.empty()) {
    return {nullptr, fmt::format("authentication required: no token, and no tls_subject rule matches {}", tlsSubject)};
  }
  if (unixUid) {
    return {nullptr, fmt::format("authentication required: no token, and no unix_uid rule matches uid {}", *unixUid)};
  }
  return {nullptr, "authentication required: no token (set TALLY_TOKEN)"};
}

PriorityDecision decidePriority(const TenantRule& rule, PriorityClass requested) {
  bool tooHigh = requested == PriorityClass::kHigh && rule.allowedPriority == AllowedPriority::kBestEffort;
  if (!tooHigh) return {requested, false, {}};
  if (rule.capPriority) return {PriorityClass::kBestEffort, true, {}};
  return {requested, false, fmt::format("tenant {} may not request high priority", rule.name)};
}

PriorityDecision decideAnonymousPriority(const AuthPolicy& policy, bool unixPeer, PriorityClass requested) {
  if (requested != PriorityClass::kHigh || unixPeer || policy.allowAnonymousHighPriority) return {requested, false, {}};
  return {requested, false,
          "an anonymous TCP peer may not request high priority (a [[tenant]] rule with a token can allow it, or "
          "allow_anonymous_high_priority = true)"};
}

bool withinQuota(size_t used, size_t request, size_t quota) {
  if (quota == 0) return true;
  return used <= quota && request <= quota - used;
}

bool withinStreamLimit(size_t count, size_t maxStreams) { return maxStreams == 0 || count < maxStreams; }

size_t pitchedBytesUpperBound(size_t width, size_t height) {
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  if (width > kMax - (kPitchAlignment - 1)) return kMax;
  size_t pitch = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (height != 0 && pitch > kMax / height) return kMax;
  return pitch * height;
}

}  // namespace tally::server::session
