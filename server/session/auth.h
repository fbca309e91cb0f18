// Who may connect, and with which limits: the [[tenant]] rules of tallyd's configuration and
// the pure decisions the handshake makes with them (token/uid matching, priority, quotas).
// No CUDA and no sockets here, so every rule can be unit-tested.
#pragma once

#include "common/hash/content_hash.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tally::server::session {

enum class PriorityClass { kHigh, kBestEffort };

// The most a tenant may ask for: `kHigh` and `kAny` allow both classes.
enum class AllowedPriority { kHigh, kBestEffort, kAny };

using Sha256 = hash::Sha256;

// What one tenant may use; 0 = unlimited.
struct TenantLimits {
  uint64_t memoryQuotaBytes = 0;
  uint32_t maxStreams = 0;
  uint64_t maxCallsPerSecond = 0;  // 0: unlimited (call_rate_limit.h)
  uint64_t stagingBytes = 64ull << 20;  // pinned staging held at once before copies wait (staging_pool.h)
};

// One [[tenant]] entry. At least one of tokenSha256 / unixUid / tlsSubject is set; a peer must
// match every one that is set (the token, the Unix uid, the TLS client certificate's subject).
struct TenantRule {
  std::string name;
  std::optional<Sha256> tokenSha256;
  std::optional<uint32_t> unixUid;
  std::optional<std::string> tlsSubject;  // e.g. "/CN=inference-1", as tallyd logs it
  AllowedPriority allowedPriority = AllowedPriority::kAny;
  bool capPriority = false;  // downgrade a too-high request instead of refusing it
  TenantLimits limits;
};

struct AuthPolicy {
  bool requireAuth = false;  // refuse peers that match no rule
  std::vector<TenantRule> tenants;
};

// Parses 64 hex digits (either case); false on anything else.
bool parseSha256Hex(std::string_view hex, Sha256& out);
Sha256 sha256(std::span<const uint8_t> bytes);

// The outcome of authentication: the matched rule (nullptr: anonymous, allowed only when
// the policy does not require authentication) or why the peer is refused.
struct AuthResult {
  const TenantRule* rule = nullptr;
  std::string error;  // non-empty: refuse with this text
};

// `token`: the Hello's authToken (may be empty). `unixUid`: SO_PEERCRED uid of a Unix-socket
// peer, nullopt otherwise. `tlsSubject`: the verified client certificate's subject of a TLS
// peer, empty otherwise. Token hashes are compared in constant time.
AuthResult authenticate(const AuthPolicy& policy, std::span<const uint8_t> token, std::optional<uint32_t> unixUid,
                        std::string_view tlsSubject = {});

struct PriorityDecision {
  PriorityClass granted = PriorityClass::kBestEffort;
  bool capped = false;  // the request was downgraded
  std::string error;    // non-empty: refuse with this text
};

PriorityDecision decidePriority(const TenantRule& rule, PriorityClass requested);

// True if `request` more bytes keep `used` within `quota` (0 = unlimited); overflow-safe.
bool withinQuota(size_t used, size_t request, size_t quota);
// True if one more stream keeps `count` within `maxStreams` (0 = unlimited).
bool withinStreamLimit(size_t count, size_t maxStreams);
// Upper bound of what cuMemAllocPitch(width, height) takes (rows rounded up to
// kPitchAlignment); saturates at SIZE_MAX instead of overflowing.
inline constexpr size_t kPitchAlignment = 512;
size_t pitchedBytesUpperBound(size_t width, size_t height);

}  // namespace tally::server::session
