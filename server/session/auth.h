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
  // Objects held at once; each costs driver handles, pinned pages or address space in tallyd.
  uint32_t maxEvents = 65536;
  uint32_t maxModules = 4096;
  uint32_t maxHostMappings = 1024;
  uint64_t maxCallsPerSecond = 0;  // 0: unlimited (call_rate_limit.h)
  uint64_t stagingBytes = 64ull << 20;  // pinned staging held at once before copies wait (staging_pool.h)
  // The most a tenant may raise the shared context's limits to (cuCtxSetLimit); every tenant
  // pays for them. The stack costs this much per thread the GPU can hold (16 KiB: ~4 GiB on an
  // H200); heap and printf buffer bytes also count against memoryQuotaBytes.
  uint64_t maxStackBytes = 16ull << 10;
  uint64_t maxMallocHeapBytes = 1ull << 30;
  uint64_t maxPrintfFifoBytes = 64ull << 20;
  uint64_t maxPendingLaunches = 32768;  // device-side launches queued at once (CDP)
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
  // An anonymous peer (no rule matched) over TCP or TLS may ask for high priority only with
  // this set: anyone who reaches the port is such a peer. Over a Unix socket the socket's
  // permissions decide who connects, and an anonymous peer may ask for either class.
  bool allowAnonymousHighPriority = false;
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
// When any rule names a unix_uid, a peer without a uid (TCP, TLS) that no rule identifies is
// refused even without require_auth: otherwise a local user held to a uid rule could connect
// over loopback TCP instead and be admitted anonymously, without the rule's limits.
AuthResult authenticate(const AuthPolicy& policy, std::span<const uint8_t> token, std::optional<uint32_t> unixUid,
                        std::string_view tlsSubject = {});

struct PriorityDecision {
  PriorityClass granted = PriorityClass::kBestEffort;
  bool capped = false;  // the request was downgraded
  std::string error;    // non-empty: refuse with this text
};

PriorityDecision decidePriority(const TenantRule& rule, PriorityClass requested);
// The same for a peer that no rule matched (AuthPolicy::allowAnonymousHighPriority).
PriorityDecision decideAnonymousPriority(const AuthPolicy& policy, bool unixPeer, PriorityClass requested);

// True if `request` more bytes keep `used` within `quota` (0 = unlimited); overflow-safe.
bool withinQuota(size_t used, size_t request, size_t quota);
// True if one more stream keeps `count` within `maxStreams` (0 = unlimited).
bool withinStreamLimit(size_t count, size_t maxStreams);
// Upper bound of what cuMemAllocPitch(width, height) takes (rows rounded up to
// kPitchAlignment); saturates at SIZE_MAX instead of overflowing.
inline constexpr size_t kPitchAlignment = 512;
size_t pitchedBytesUpperBound(size_t width, size_t height);

}  // namespace tally::server::session
