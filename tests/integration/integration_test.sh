#!/usr/bin/env bash
# Integration tests of tallyd + libtally_client.so that need no GPU (registered by
# tests/integration/CMakeLists.txt, label "integration").
#
#   integration_test.sh CASE TALLYD CLIENT_LIB PROGRAM SCHEMA_DIR [CUDA_LIB_DIR]
#
#   CASE         no_server | no_gpu | garbage_peer | version_mismatch |
#                security_tokens | security_require_auth | security_priority |
#                security_cap_priority | security_uid_rule | security_bad_config |
#                operations_status | operations_drain | operations_evict | operations_no_socket
#   TALLYD       the tallyd executable
#   CLIENT_LIB   libtally_client.so (LD_PRELOADed into PROGRAM)
#   PROGRAM      an nvcc-built (-cudart shared) program, e.g. tests/gpu/gpu_vector_add;
#                "" when the CUDA programs are not built
#   SCHEMA_DIR   the repository's schema/ (for `capnp encode/decode`)
#   CUDA_LIB_DIR appended to LD_LIBRARY_PATH so PROGRAM finds libcudart
#
# TALLYCTL (environment) is tallyctl; by default the one next to TALLYD. tallyd always gets a
# control socket of its own under the test's temporary directory.
#
# Exit status: 0 passed, 1 failed, 77 skipped (the reason is printed).
# Every wait is bounded: a client run gets 10 s, tallyd's start 10 s, its stop 5 s.
set -uo pipefail

[[ $# -ge 5 ]] || { echo "usage: $0 CASE TALLYD CLIENT_LIB PROGRAM SCHEMA_DIR [CUDA_LIB_DIR]" >&2; exit 2; }
CASE=$1 TALLYD=$2 CLIENT_LIB=$3 PROGRAM=$4 SCHEMA_DIR=$5 CUDA_LIB_DIR=${6:-}
TALLYCTL=${TALLYCTL:-$(dirname "$TALLYD")/tallyctl}

# The developer's own client settings must not leak into the tests.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^TALLY_' || true)

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RAW_PEER=$HERE/raw_peer.py
NO_GPU_MSG='no GPU is visible to tallyd'
CLIENT_TIMEOUT=10

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-it.XXXXXX") || { echo "FAIL: mktemp" >&2; exit 1; }
SOCK=$TMPD/t.sock
ADMIN_SOCK=$TMPD/admin.sock
LOG=$TMPD/tallyd.log
PORT=""
TALLYD_PID=""
HELPER_PIDS=()

say() { printf '%s\n' "$*"; }
show() {  # show FILE TITLE: print a file indented (for failure diagnostics)
  [[ -s $1 ]] || return 0
  say "---- $2"
  sed 's/^/    | /' "$1" | tail -n 40
}

cleanup() {
  local rc=$?
  set +e
  for p in "${HELPER_PIDS[@]}"; do
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  if [[ -n $TALLYD_PID ]] && kill -0 "$TALLYD_PID" 2>/dev/null; then
    kill -KILL "$TALLYD_PID" 2>/dev/null
    wait "$TALLYD_PID" 2>/dev/null
  fi
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then show "$LOG" "tallyd log"; fi
  rm -rf "$TMPD"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { say "FAIL: $*"; exit 1; }
pass() { say "ok: $*"; }
skip() { say "SKIP: $*"; exit 77; }

now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

gpu_visible() { [[ -e /dev/nvidia0 ]]; }

need_program() {
  [[ -n $PROGRAM ]] || skip "the CUDA test programs are not built (TALLY_BUILD_CUDA_PROGRAMS=OFF)"
  [[ -x $PROGRAM ]] || fail "test program not built: $PROGRAM"
  [[ -f $CLIENT_LIB ]] || fail "client library not built: $CLIENT_LIB"
}

# ------------------------------------------------------------------ tallyd
pick_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

tcp_listening() {  # tcp_listening PORT: is something LISTENing on 127.0.0.1:PORT?
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' /proc/net/tcp
}

start_tallyd() {  # start_tallyd [EXTRA_TALLYD_ARGS...], e.g. --config FILE
  [[ -x $TALLYD ]] || fail "tallyd not built: $TALLYD"
  local _attempt
  for _attempt in 1 2 3; do
    PORT=$(pick_port) || fail "no free TCP port"
    "$TALLYD" "$@" --listen "unix:$SOCK" --listen "tcp://127.0.0.1:$PORT" --admin "unix:$ADMIN_SOCK" >"$LOG" 2>&1 &
    TALLYD_PID=$!
    local deadline=$(($(now_ms) + 10000))
    while (($(now_ms) < deadline)); do
      if [[ -S $SOCK ]] && tcp_listening "$PORT"; then
        say "tallyd pid $TALLYD_PID listening on unix:$SOCK and tcp://127.0.0.1:$PORT"
        return 0
      fi
      if ! kill -0 "$TALLYD_PID" 2>/dev/null; then
        wait "$TALLYD_PID" 2>/dev/null
        TALLYD_PID=""
        # Another process may have taken the port between pick_port and the bind.
        if grep -qiE 'in use|EADDRINUSE' "$LOG"; then continue 2; fi
        fail "tallyd exited during startup"
      fi
      sleep 0.05
    done
    fail "tallyd did not listen on unix:$SOCK and tcp://127.0.0.1:$PORT within 10 s"
  done
  fail "tallyd could not bind a free TCP port in 3 attempts"
}

assert_tallyd_alive() {
  kill -0 "$TALLYD_PID" 2>/dev/null || fail "tallyd died ($1)"
  [[ -S $SOCK ]] || fail "tallyd's socket $SOCK vanished ($1)"
  pass "tallyd still alive $1"
}

stop_tallyd() {  # SIGTERM; tallyd must exit 0 within 5 s and remove its socket
  kill -TERM "$TALLYD_PID" 2>/dev/null || fail "tallyd was not running at shutdown"
  local deadline=$(($(now_ms) + 5000))
  while kill -0 "$TALLYD_PID" 2>/dev/null && (($(now_ms) < deadline)); do sleep 0.05; done
  if kill -0 "$TALLYD_PID" 2>/dev/null; then
    fail "tallyd still running 5 s after SIGTERM"
  fi
  local rc=0
  wait "$TALLYD_PID" || rc=$?
  TALLYD_PID=""
  [[ $rc -eq 0 ]] || fail "tallyd exited $rc after SIGTERM (expected 0)"
  [[ ! -e $SOCK ]] || fail "tallyd left its socket file $SOCK behind"
  pass "tallyd exited 0 on SIGTERM and removed its socket"
}

wait_log() {  # wait_log ERE [seconds]: wait until tallyd's log has a line matching ERE
  local deadline=$(($(now_ms) + ${2:-5} * 1000))
  while (($(now_ms) < deadline)); do
    grep -qE -- "$1" "$LOG" && return 0
    sleep 0.05
  done
  grep -qE -- "$1" "$LOG"
}

# ------------------------------------------------------------------ clients
# run_client NAME SERVER_URL: runs PROGRAM preloaded; sets RC, MS (elapsed), OUT, ERR.
# CLIENT_ENV (an array of NAME=VALUE) adds to the client's environment, e.g. TALLY_TOKEN.
CLIENT_ENV=()
run_client() {
  local name=$1 url=$2
  OUT=$TMPD/$name.out ERR=$TMPD/$name.err
  local t0
  t0=$(now_ms)
  RC=0
  timeout -k 2 "$CLIENT_TIMEOUT" env LD_PRELOAD="$CLIENT_LIB" TALLY_SERVER="$url" TALLY_TENANT="it-$name" \
    LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CUDA_LIB_DIR" "${CLIENT_ENV[@]}" \
    "$PROGRAM" >"$OUT" 2>"$ERR" </dev/null || RC=$?
  MS=$(($(now_ms) - t0))
  say "client $name (TALLY_SERVER=$url${CLIENT_ENV[*]:+ ${CLIENT_ENV[*]}}): exit $RC after ${MS} ms"
}

# expect_refused NAME URL TEXT: the client must fail cleanly, in time, saying TEXT
expect_refused() {
  local name=$1 url=$2 text=$3
  run_client "$name" "$url"
  local why=""
  if [[ $RC -eq 124 || $RC -eq 137 ]]; then why="hung: killed after ${CLIENT_TIMEOUT} s"
  elif [[ $RC -eq 0 ]]; then why="exited 0 (expected a failure)"
  elif [[ $RC -ge 128 ]]; then why="crashed (exit $RC = signal $((RC - 128)))"
  elif ! grep -qF -- "$text" "$ERR"; then why="stderr does not contain '$text'"
  fi
  if [[ -n $why ]]; then
    show "$OUT" "client stdout"
    show "$ERR" "client stderr"
    fail "client $name: $why"
  fi
  pass "client $name failed cleanly (exit $RC, ${MS} ms): $(grep -F -- "$text" "$ERR" | head -n 1)"
}

# expect_served NAME URL: with a GPU behind tallyd the client must succeed
expect_served() {
  run_client "$1" "$2"
  if [[ $RC -ne 0 ]]; then
    show "$OUT" "client stdout"
    show "$ERR" "client stderr"
    fail "client $1 exited $RC (expected 0: a GPU is visible to tallyd)"
  fi
  pass "client $1 was served (exit 0)"
}

# ------------------------------------------------------------------ raw peers
# raw_peer NAME MODE [ARGS...]: runs raw_peer.py; sets PEER_RC and PEER_PID
raw_peer() {
  local name=$1
  shift
  PEER_RC=0
  timeout -k 2 15 python3 "$RAW_PEER" "$SOCK" "$@" >"$TMPD/$name.out" 2>"$TMPD/$name.err" </dev/null || PEER_RC=$?
  PEER_PID=$(sed -n 's/^pid=\([0-9]*\)$/\1/p' "$TMPD/$name.err" | head -n 1)
  [[ -n $PEER_PID ]] || { show "$TMPD/$name.err" "raw peer stderr"; fail "raw peer $name did not start"; }
}

# peer_lines PID: tallyd's log lines about the peer with that pid that give a reason
# ("... unix pid=N uid=.. gid=..: <reason>" or "... pid=N ... failed: <reason>")
peer_lines() {
  grep -E -- "pid=$1([^0-9]|\$)" "$LOG" | grep -Ei -- '(fail|drop|refus|reject|disconnect|closed|invalid|exceed|bad).*: .+|: .*(fail|drop|refus|reject|closed|invalid|exceed|bad)'
}

# expect_peer_logged PID WHAT: tallyd logged why it dropped/refused that peer
expect_peer_logged() {
  local pid=$1 what=$2
  local deadline=$(($(now_ms) + 5000))
  until peer_lines "$pid" >/dev/null; do
    (($(now_ms) < deadline)) || fail "tallyd logged no dropped/refused peer with a reason for the $what peer (pid $pid)"
    sleep 0.05
  done
  local line
  line=$(peer_lines "$pid" | head -n 1)
  pass "tallyd logged the $what peer: ${line##*\] }"
}

# ------------------------------------------------------------------ cases
case_no_server() {
  need_program
  expect_refused no-server "unix:$TMPD/absent.sock" "cannot reach tallyd at unix:"
  # A misspelt class is refused before any connection, never taken as best-effort.
  CLIENT_ENV=(TALLY_PRIORITY=hgih)
  expect_refused priority-typo "unix:$TMPD/absent.sock" "TALLY_PRIORITY='hgih': expected 'high' or 'best-effort'"
  CLIENT_ENV=()
}

case_no_gpu() {
  gpu_visible && skip "a GPU is visible; this test covers the no-GPU path"
  need_program
  start_tallyd
  wait_log "$NO_GPU_MSG" 5 || fail "tallyd's log does not say '$NO_GPU_MSG'"
  pass "tallyd log: $(grep -F -- "$NO_GPU_MSG" "$LOG" | head -n 1 | sed 's/^.*\] //')"
  expect_refused uds "unix:$SOCK" "$NO_GPU_MSG"
  expect_refused tcp "tcp://127.0.0.1:$PORT" "$NO_GPU_MSG"
  assert_tallyd_alive "after the refused clients"
  stop_tallyd
}

# tallyd admits the client, then dies: the next CUDA call must fail with a clear error, not hang
# or crash. A fake tallyd (fake_tallyd.py) sends a real Welcome (made with capnp encode) for one
# fake device and closes.
case_tallyd_dies() {
  need_program
  command -v capnp >/dev/null 2>&1 || skip "the capnp tool (package capnproto) is not installed"
  echo '(welcome = (accepted = true, protocolVersion = 3, tenantId = 1, driverVersion = 13000,
    devices = [(ordinal = 0, name = "fake GPU", major = 9, minor = 0, totalMem = 1000000000,
                streamPriorityLeast = 0, streamPriorityGreatest = -5)]))' |
    capnp encode -I"$SCHEMA_DIR" "$SCHEMA_DIR/envelope.capnp" ServerMessage >"$TMPD/welcome.bin" 2>"$TMPD/encode.err" ||
    { show "$TMPD/encode.err" "capnp encode"; fail "could not encode a Welcome"; }
  python3 "$HERE/fake_tallyd.py" "$SOCK" "$TMPD/welcome.bin" >"$TMPD/fake.out" 2>&1 &
  HELPER_PIDS+=($!)
  local deadline=$(($(now_ms) + 5000))
  until [[ -S $SOCK ]]; do
    (($(now_ms) < deadline)) || fail "the fake tallyd did not listen"
    sleep 0.05
  done
  expect_refused tallyd-dies "unix:$SOCK" "lost the connection to tallyd"
  grep -q "welcomed; gone" "$TMPD/fake.out" || { show "$TMPD/fake.out" "fake tallyd"; fail "the client was not admitted first"; }
  grep -q "cudaErrorDevicesUnavailable" "$ERR" || fail "the application did not see cudaErrorDevicesUnavailable"
  pass "admitted, then tallyd vanished: the application's next call failed with cudaErrorDevicesUnavailable"
}

case_garbage_peer() {
  start_tallyd

  # A peer that connects and says nothing must not hold anything up.
  python3 "$RAW_PEER" "$SOCK" idle >"$TMPD/idle.out" 2>"$TMPD/idle.err" </dev/null &
  HELPER_PIDS+=($!)
  local deadline=$(($(now_ms) + 5000))
  until grep -q idle-connected "$TMPD/idle.out" 2>/dev/null; do
    (($(now_ms) < deadline)) || fail "the idle peer could not connect"
    sleep 0.05
  done
  pass "an idle peer is connected (and stays connected)"

  raw_peer garbage garbage
  [[ $PEER_RC -eq 0 ]] || fail "tallyd did not close the connection of a peer that sent 'GET / HTTP/1.1' (raw_peer exit $PEER_RC)"
  pass "tallyd closed the connection of a peer that sent an HTTP request"
  expect_peer_logged "$PEER_PID" "HTTP garbage"
  assert_tallyd_alive "after the HTTP garbage"

  raw_peer truncated truncated
  [[ $PEER_RC -eq 0 ]] || fail "raw_peer truncated exited $PEER_RC"
  expect_peer_logged "$PEER_PID" "truncated-frame"
  assert_tallyd_alive "after the truncated frame"

  raw_peer oversize oversize
  [[ $PEER_RC -eq 0 ]] || fail "tallyd did not close the connection of a peer announcing a 4 GiB message (raw_peer exit $PEER_RC)"
  expect_peer_logged "$PEER_PID" "oversized-frame"
  assert_tallyd_alive "after the oversized frame header"

  if [[ -n $PROGRAM ]]; then
    need_program
    if gpu_visible; then
      expect_served after-garbage "unix:$SOCK"
    else
      expect_refused after-garbage "unix:$SOCK" "$NO_GPU_MSG"
    fi
  else
    say "note: no CUDA test program built; the follow-up client run is left out"
  fi
  assert_tallyd_alive "after the follow-up client"
  stop_tallyd  # with the idle peer still connected
}

# What tallyd holds besides its tenants: open descriptors and threads.
tallyd_fds() { ls "/proc/$TALLYD_PID/fd" | wc -l; }
tallyd_threads() { ls "/proc/$TALLYD_PID/task" | wc -l; }

# Clients killed mid-handshake: every prefix of a valid Hello frame (and the whole of it), each
# connection dropped right after — some with a reset, as for a killed process — and idle peers
# killed with SIGKILL. tallyd must end where it started: same descriptors and threads, no tenant.
case_killed_mid_handshake() {
  command -v capnp >/dev/null 2>&1 || skip "the capnp tool (package capnproto) is not installed"
  echo "(hello = (protocolVersion = 3, tenantName = \"it-killed\", clientPid = $$))" |
    capnp encode -I"$SCHEMA_DIR" "$SCHEMA_DIR/envelope.capnp" ClientMessage >"$TMPD/hello.bin" 2>"$TMPD/encode.err" ||
    { show "$TMPD/encode.err" "capnp encode"; fail "could not encode a Hello"; }
  start_tallyd
  sleep 0.3
  local fds threads
  fds=$(tallyd_fds) threads=$(tallyd_threads)
  raw_peer cuts cuts "$TMPD/hello.bin" 400
  [[ $PEER_RC -eq 0 ]] || { show "$TMPD/cuts.err" "raw peer stderr"; fail "raw_peer cuts exited $PEER_RC"; }
  pass "$(cat "$TMPD/cuts.out")"
  local idle_pids=() i
  for i in $(seq 1 20); do
    python3 "$RAW_PEER" "$SOCK" idle >/dev/null 2>&1 </dev/null &
    idle_pids+=($!)
  done
  sleep 0.5
  kill -KILL "${idle_pids[@]}" 2>/dev/null
  wait "${idle_pids[@]}" 2>/dev/null
  pass "20 connected idle peers killed with SIGKILL"
  assert_tallyd_alive "after the killed clients"
  local deadline=$(($(now_ms) + 5000))
  until [[ $(tallyd_fds) -eq $fds && $(tallyd_threads) -eq $threads ]]; do
    (($(now_ms) < deadline)) || fail "tallyd holds $(tallyd_fds) descriptors and $(tallyd_threads) threads, $fds and $threads before"
    sleep 0.05
  done
  pass "tallyd is back to $fds descriptors and $threads threads"
  ctl_ok status status
  ctl_expect '^tenants +0$' "no tenant left"
  stop_tallyd
}

case_version_mismatch() {
  command -v capnp >/dev/null 2>&1 || skip "the capnp tool (package capnproto) is not installed"
  [[ -f $SCHEMA_DIR/envelope.capnp ]] || fail "schema not found: $SCHEMA_DIR/envelope.capnp"
  local bogus=4000000000
  if ! echo "(hello = (protocolVersion = $bogus, tenantName = \"it-version-mismatch\", clientPid = $$))" |
      capnp encode -I"$SCHEMA_DIR" "$SCHEMA_DIR/envelope.capnp" ClientMessage >"$TMPD/hello.bin" 2>"$TMPD/encode.err"; then
    show "$TMPD/encode.err" "capnp encode"
    fail "could not encode a Hello with capnp encode"
  fi
  start_tallyd
  raw_peer mismatch hello "$TMPD/hello.bin"
  [[ $PEER_RC -eq 0 ]] || { show "$TMPD/mismatch.err" "raw peer stderr"; fail "no complete Welcome reply, or the connection stayed open (raw_peer exit $PEER_RC)"; }
  capnp decode -I"$SCHEMA_DIR" "$SCHEMA_DIR/envelope.capnp" ServerMessage <"$TMPD/mismatch.out" >"$TMPD/welcome.txt" 2>&1 ||
    { show "$TMPD/welcome.txt" "capnp decode"; fail "tallyd's reply is not a ServerMessage"; }
  say "reply: $(tr -s ' \n' ' ' <"$TMPD/welcome.txt")"
  grep -q 'welcome' "$TMPD/welcome.txt" || fail "the reply is not a Welcome"
  grep -q 'accepted = true' "$TMPD/welcome.txt" && fail "tallyd accepted protocol version $bogus"
  grep -q "$bogus" "$TMPD/welcome.txt" || fail "the refusal does not name the client's protocol version"
  pass "tallyd refused protocol version $bogus with a reason"
  expect_peer_logged "$PEER_PID" "version-mismatch"
  assert_tallyd_alive "after the version mismatch"
  stop_tallyd
}

# ------------------------------------------------------------------ security cases
# Tokens of the two tenants of the test configuration; tallyd only ever sees their SHA-256.
TOKEN_A=token-of-alice-0123456789
TOKEN_B=token-of-bob-9876543210
hash_of() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# write_config FILE [EXTRA_TOP_LEVEL_LINES] [BOB_EXTRA_LINES]: two tenants, alice (may ask for
# high priority, quotas set) and bob (best effort only)
write_config() {
  cat >"$1" <<EOF_CONFIG
log_level = "debug"
${2:-}

[[tenant]]
name = "alice"
token_sha256 = "$(hash_of "$TOKEN_A")"
allowed_priority = "high"
memory_quota_bytes = 1073741824
max_streams = 16

[[tenant]]
name = "bob"
token_sha256 = "$(hash_of "$TOKEN_B")"
allowed_priority = "best-effort"
${3:-}
EOF_CONFIG
}

# expect_past_auth NAME URL: the client passed authentication and the priority rule: served
# with a GPU; without one refused for the only reason left, "no GPU is visible to tallyd"
expect_past_auth() {
  if gpu_visible; then expect_served "$1" "$2"; else expect_refused "$1" "$2" "$NO_GPU_MSG"; fi
}

expect_log() {  # expect_log ERE WHAT
  wait_log "$1" 5 || fail "tallyd's log has no line matching '$1' ($2)"
  pass "tallyd logged $2: $(grep -E -- "$1" "$LOG" | head -n 1 | sed 's/^.*\] //')"
}

case_security_tokens() {
  need_program
  write_config "$TMPD/tallyd.toml"
  start_tallyd --config "$TMPD/tallyd.toml"
  CLIENT_ENV=(TALLY_TOKEN="$TOKEN_A" TALLY_PRIORITY=high)
  expect_past_auth alice-uds "unix:$SOCK"
  expect_log "authenticated as tenant alice" "alice's authentication"
  expect_past_auth alice-tcp "tcp://127.0.0.1:$PORT"
  CLIENT_ENV=(TALLY_TOKEN="$TOKEN_B")
  expect_past_auth bob "unix:$SOCK"
  CLIENT_ENV=(TALLY_TOKEN="not-a-known-token")
  expect_refused wrong-token "unix:$SOCK" "refused the connection: unknown token"
  expect_log "refused unix pid=[0-9]+ uid=[0-9]+ gid=[0-9]+: unknown token" "the wrong token with its peer"
  expect_refused wrong-token-tcp "tcp://127.0.0.1:$PORT" "refused the connection: unknown token"
  expect_log "refused tcp 127\.0\.0\.1:[0-9]+: unknown token" "the wrong token over TCP with its peer"
  grep -qF -- "not-a-known-token" "$LOG" && fail "tallyd logged the token itself"
  pass "tallyd never logs a token"
  CLIENT_ENV=()
  expect_past_auth no-token "unix:$SOCK"  # require_auth = false (the default): anonymous
  assert_tallyd_alive "after the authentication cases"
  stop_tallyd
}

case_security_require_auth() {
  need_program
  write_config "$TMPD/tallyd.toml" "require_auth = true"
  start_tallyd --config "$TMPD/tallyd.toml"
  CLIENT_ENV=()
  expect_refused no-token "unix:$SOCK" "refused the connection: authentication required"
  expect_refused no-token-tcp "tcp://127.0.0.1:$PORT" "refused the connection: authentication required"
  expect_log "refused tcp 127\.0\.0\.1:[0-9]+: authentication required" "the missing token with its peer"
  CLIENT_ENV=(TALLY_TOKEN="$TOKEN_B")
  expect_past_auth bob "unix:$SOCK"
  stop_tallyd
}

case_security_priority() {
  need_program
  write_config "$TMPD/tallyd.toml"
  start_tallyd --config "$TMPD/tallyd.toml"
  CLIENT_ENV=(TALLY_TOKEN="$TOKEN_B" TALLY_PRIORITY=high)
  expect_refused bob-high "unix:$SOCK" "refused the connection: tenant bob may not request high priority"
  expect_log "refused unix pid=[0-9]+ .*: tenant bob may not request high priority" "the refused priority"
  CLIENT_ENV=(TALLY_TOKEN="$TOKEN_B" TALLY_PRIORITY=best-effort)
  expect_past_auth bob-best-effort "unix:$SOCK"
  stop_tallyd
}

case_security_cap_priority() {
  need_program
  write_config "$TMPD/tallyd.toml" "" "cap_priority = true"
  start_tallyd --config "$TMPD/tallyd.toml"
  CLIENT_ENV=(TALLY_TOKEN="$TOKEN_B" TALLY_PRIORITY=high)
  expect_past_auth bob-high-capped "unix:$SOCK"
  expect_log "tenant bob from unix pid=[0-9]+.* asked for high priority; capped to best effort" "the downgrade"
  stop_tallyd
}

case_security_uid_rule() {
  need_program
  write_config "$TMPD/tallyd.toml" "require_auth = true"
  printf '\n[[tenant]]\nname = "local-user"\nunix_uid = %s\n' "$(id -u)" >>"$TMPD/tallyd.toml"
  start_tallyd --config "$TMPD/tallyd.toml"
  CLIENT_ENV=()
  expect_past_auth uid-uds "unix:$SOCK"
  expect_log "uid=$(id -u) .*authenticated as tenant local-user" "the uid match"
  # TCP peers have no uid: the rule cannot match them.
  expect_refused uid-tcp "tcp://127.0.0.1:$PORT" "refused the connection: authentication required"
  stop_tallyd
}

case_security_bad_config() {
  [[ -x $TALLYD ]] || fail "tallyd not built: $TALLYD"
  local file=$TMPD/bad.toml rc
  write_config "$file" "requre_auth = true"
  rc=0
  timeout -k 2 10 "$TALLYD" --config "$file" --listen "unix:$SOCK" >"$LOG" 2>&1 || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] || fail "tallyd exited $rc with an unknown configuration key"
  grep -qF -- "unknown key 'requre_auth'" "$LOG" || { show "$LOG" "tallyd output"; fail "tallyd's message does not name the unknown key"; }
  pass "tallyd exited $rc: $(head -n 1 "$LOG")"
  write_config "$file" "" "quota = 5"
  rc=0
  timeout -k 2 10 "$TALLYD" --config "$file" --listen "unix:$SOCK" >"$LOG" 2>&1 || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] || fail "tallyd exited $rc with an unknown [[tenant]] key"
  grep -qF -- "[[tenant]] #2: unknown key 'quota'" "$LOG" || { show "$LOG" "tallyd output"; fail "tallyd's message does not name the tenant entry and key"; }
  pass "tallyd exited $rc: $(head -n 1 "$LOG")"
  write_config "$file"
  sed -i 's/allowed_priority = "best-effort"/allowed_priority = "urgent"/' "$file"
  rc=0
  timeout -k 2 10 "$TALLYD" --config "$file" --listen "unix:$SOCK" >"$LOG" 2>&1 || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] || fail "tallyd exited $rc with allowed_priority = \"urgent\""
  grep -qF -- "'allowed_priority' is 'urgent'" "$LOG" || { show "$LOG" "tallyd output"; fail "tallyd's message does not name the bad value"; }
  pass "tallyd exited $rc: $(head -n 1 "$LOG")"
  [[ ! -e $SOCK ]] || fail "tallyd created its socket despite the bad configuration"
}

# ------------------------------------------------------------------ connection hardening
# A peer that never completes its Hello — silent, or trickling one byte every 100 ms — is
# dropped after handshake_timeout_ms, and logged; tallyd is back to its threads.
case_security_handshake_timeout() {
  printf 'handshake_timeout_ms = 500\n' >"$TMPD/tallyd.toml"
  start_tallyd --config "$TMPD/tallyd.toml"
  sleep 0.3
  local threads
  threads=$(tallyd_threads)
  local mode t0
  for mode in silent trickle; do
    t0=$(now_ms)
    raw_peer "$mode" "$mode"
    [[ $PEER_RC -eq 0 ]] || fail "tallyd kept a $mode peer connected for 5 s (raw_peer exit $PEER_RC)"
    pass "tallyd dropped the $mode peer after $(($(now_ms) - t0)) ms"
    expect_log "handshake with unix pid=$PEER_PID .*no complete Hello within 500 ms \(handshake_timeout_ms\)" \
      "the $mode peer's handshake timeout"
  done
  local deadline=$(($(now_ms) + 5000))
  until [[ $(tallyd_threads) -eq $threads ]]; do
    (($(now_ms) < deadline)) || fail "tallyd holds $(tallyd_threads) threads, $threads before the peers"
    sleep 0.05
  done
  pass "tallyd is back to $threads threads"
  assert_tallyd_alive "after the handshake timeouts"
  stop_tallyd
}

# max_connections = 3: three idle peers hold every slot; the next peers are refused with the
# reason before any thread starts for them; once the idle peers are gone a client gets in again.
case_security_max_connections() {
  command -v capnp >/dev/null 2>&1 || skip "the capnp tool (package capnproto) is not installed"
  echo "(hello = (protocolVersion = 3, tenantName = \"it-over-limit\", clientPid = $$))" |
    capnp encode -I"$SCHEMA_DIR" "$SCHEMA_DIR/envelope.capnp" ClientMessage >"$TMPD/hello.bin" 2>"$TMPD/encode.err" ||
    { show "$TMPD/encode.err" "capnp encode"; fail "could not encode a Hello"; }
  printf 'max_connections = 3\nhandshake_timeout_ms = 60000\n' >"$TMPD/tallyd.toml"
  start_tallyd --config "$TMPD/tallyd.toml"
  local idle_pids=() i
  for i in 1 2 3; do
    python3 "$RAW_PEER" "$SOCK" idle >"$TMPD/idle$i.out" 2>/dev/null </dev/null &
    idle_pids+=($!)
    HELPER_PIDS+=($!)
  done
  # Setup, not a measurement: three Python peers may take seconds to start on a loaded machine.
  local deadline=$(($(now_ms) + 30000))
  until [[ $(cat "$TMPD"/idle?.out 2>/dev/null | grep -c idle-connected) -eq 3 ]]; do
    (($(now_ms) < deadline)) || fail "the idle peers could not connect"
    sleep 0.05
  done
  sleep 0.3
  local threads
  threads=$(tallyd_threads)
  for i in $(seq 1 10); do
    raw_peer "over$i" hello "$TMPD/hello.bin"
    [[ $PEER_RC -eq 0 ]] || { show "$TMPD/over$i.err" "raw peer stderr"; fail "peer over the limit got no complete answer (raw_peer exit $PEER_RC)"; }
  done
  capnp decode -I"$SCHEMA_DIR" "$SCHEMA_DIR/envelope.capnp" ServerMessage <"$TMPD/over1.out" >"$TMPD/welcome.txt" 2>&1 ||
    { show "$TMPD/welcome.txt" "capnp decode"; fail "tallyd's answer is not a ServerMessage"; }
  grep -q 'accepted = true' "$TMPD/welcome.txt" && fail "tallyd accepted a connection over max_connections"
  grep -q 'max_connections = 3' "$TMPD/welcome.txt" || { show "$TMPD/welcome.txt" "answer"; fail "the refusal does not name max_connections"; }
  pass "10 peers over the limit refused: $(tr -s ' \n' ' ' <"$TMPD/welcome.txt")"
  [[ $(tallyd_threads) -eq $threads ]] || fail "tallyd went from $threads to $(tallyd_threads) threads for refused peers"
  pass "no thread started for the refused peers ($threads threads)"
  expect_log "refused unix pid=[0-9]+ .*: tallyd is at its connection limit \(max_connections = 3\)" "the refusal"
  if [[ -n $PROGRAM ]]; then
    need_program
    expect_refused over-limit-client "unix:$SOCK" "refused the connection: tallyd is at its connection limit"
    expect_refused over-limit-client-tcp "tcp://127.0.0.1:$PORT" "refused the connection: tallyd is at its connection limit"
  fi
  kill -KILL "${idle_pids[@]}" 2>/dev/null
  wait "${idle_pids[@]}" 2>/dev/null
  deadline=$(($(now_ms) + 5000))
  while :; do
    raw_peer after hello "$TMPD/hello.bin"
    capnp decode -I"$SCHEMA_DIR" "$SCHEMA_DIR/envelope.capnp" ServerMessage <"$TMPD/after.out" >"$TMPD/after.txt" 2>&1
    grep -q "$NO_GPU_MSG\|accepted = true" "$TMPD/after.txt" && break
    (($(now_ms) < deadline)) || { show "$TMPD/after.txt" "answer"; fail "no slot came back after the idle peers left"; }
    sleep 0.1
  done
  pass "slots came back once the idle peers left: $(tr -s ' \n' ' ' <"$TMPD/after.txt" | cut -c1-120)"
  stop_tallyd
}

# The socket's directory and file: a directory anyone may write to (no sticky bit) and a path
# that is not a socket are refused with the reason; the socket gets unix_socket_mode exactly.
case_security_socket_dir() {
  [[ -x $TALLYD ]] || fail "tallyd not built: $TALLYD"
  local rc
  mkdir -m 0777 "$TMPD/open" && chmod 0777 "$TMPD/open"
  rc=0
  timeout -k 2 10 "$TALLYD" --listen "unix:$TMPD/open/t.sock" --admin "" >"$LOG" 2>&1 || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] || fail "tallyd exited $rc with its socket in a world-writable directory"
  grep -q "writable by every user and has no sticky bit" "$LOG" || { show "$LOG" "tallyd output"; fail "no reason given"; }
  [[ ! -e $TMPD/open/t.sock ]] || fail "tallyd created its socket in a world-writable directory"
  pass "tallyd exited $rc: $(grep -o 'socket directory.*' "$LOG" | head -n 1)"

  echo precious >"$SOCK"
  rc=0
  timeout -k 2 10 "$TALLYD" --listen "unix:$SOCK" --admin "" >"$LOG" 2>&1 || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] || fail "tallyd exited $rc with a regular file at its socket path"
  grep -q "exists and is not a socket: not removing it" "$LOG" || { show "$LOG" "tallyd output"; fail "no reason given"; }
  [[ $(cat "$SOCK") == precious ]] || fail "tallyd removed or changed the file at its socket path"
  pass "tallyd kept the regular file at its socket path and said why it stopped"
  rm -f "$SOCK"

  printf 'unix_socket_mode = 0o660\n' >"$TMPD/tallyd.toml"
  local old_umask mode
  old_umask=$(umask)
  umask 077
  start_tallyd --config "$TMPD/tallyd.toml"
  umask "$old_umask"
  mode=$(stat -c %a "$SOCK")
  [[ $mode == 660 ]] || fail "the socket has mode $mode under umask 077 (expected 660)"
  pass "the socket has mode 660 under umask 077"
  stop_tallyd
}

# Anonymous peers: with a unix_uid rule (and no require_auth) a TCP peer without a token is
# refused; anonymous high priority over TCP needs allow_anonymous_high_priority.
case_security_anonymous_tcp() {
  need_program
  printf '[[tenant]]\nname = "local-user"\nunix_uid = %s\nallowed_priority = "best-effort"\n' "$(id -u)" >"$TMPD/uid.toml"
  start_tallyd --config "$TMPD/uid.toml"
  CLIENT_ENV=(TALLY_PRIORITY=high)
  expect_refused uid-rule-tcp "tcp://127.0.0.1:$PORT" "refused the connection: authentication required: this tallyd identifies local users by unix_uid"
  expect_refused uid-rule-uds-high "unix:$SOCK" "tenant local-user may not request high priority"
  stop_tallyd

  start_tallyd
  expect_refused anonymous-tcp-high "tcp://127.0.0.1:$PORT" "an anonymous TCP peer may not request high priority"
  expect_log "refused tcp 127\.0\.0\.1:[0-9]+: an anonymous TCP peer may not request high priority" "the refusal with its peer"
  expect_past_auth anonymous-uds-high "unix:$SOCK"
  CLIENT_ENV=()
  expect_past_auth anonymous-tcp-best-effort "tcp://127.0.0.1:$PORT"
  stop_tallyd

  printf 'allow_anonymous_high_priority = true\n' >"$TMPD/allow.toml"
  start_tallyd --config "$TMPD/allow.toml"
  CLIENT_ENV=(TALLY_PRIORITY=high)
  expect_past_auth anonymous-tcp-high-allowed "tcp://127.0.0.1:$PORT"
  CLIENT_ENV=()
  stop_tallyd
}

# A tallyd that started over after GPU faults (TALLY_FAULT_HISTORY, server/main/restart.h) keeps
# its fault history: a tenant blamed for fault_quarantine_after recent faults is refused with the
# time left, before any GPU is needed; others are not; tallyctl status shows the faults.
case_security_quarantine() {
  need_program
  local now hex
  now=$(date +%s)
  hex=$(printf '%s' "it-repeat" | od -An -tx1 | tr -d ' \n')
  printf 'fault_quarantine_after = 2\nfault_quarantine_window_s = 600\nfault_quarantine_s = 300\n' >"$TMPD/q.toml"
  TALLY_FAULT_HISTORY=$(printf 'total 3\nlast %s\ntenant %s %s %s\n' "$(printf 'an assert' | od -An -tx1 | tr -d ' \n')" \
    "$hex" $((now - 20)) $((now - 10))) start_tallyd --config "$TMPD/q.toml"
  expect_log "tallyd started over after a GPU fault: an assert \(faults so far: 3\)" "the inherited fault history"
  expect_refused repeat "unix:$SOCK" "tenant it-repeat made the GPU fault 2 times recently; refused for another"
  if gpu_visible; then expect_served other "unix:$SOCK"; else expect_refused other "unix:$SOCK" "$NO_GPU_MSG"; fi
  ctl_ok status status
  ctl_expect '^faults +3$' "the fault count"
  ctl_expect '^  tenant +it-repeat: 2 fault\(s\), refused for [0-9]+ s more$' "the quarantined tenant"
  stop_tallyd
}

# ------------------------------------------------------------------ operations (tallyctl)
# ctl NAME ARGS...: runs tallyctl against tallyd's control socket; sets CTL_RC, CTL_OUT, CTL_ERR
ctl() {
  local name=$1
  shift
  [[ -x $TALLYCTL ]] || fail "tallyctl not built: $TALLYCTL"
  CTL_OUT=$TMPD/ctl-$name.out CTL_ERR=$TMPD/ctl-$name.err
  CTL_RC=0
  timeout -k 2 10 "$TALLYCTL" --socket "$ADMIN_SOCK" "$@" >"$CTL_OUT" 2>"$CTL_ERR" </dev/null || CTL_RC=$?
  say "tallyctl $*: exit $CTL_RC"
}

# ctl_ok NAME ARGS...: tallyctl must exit 0
ctl_ok() {
  ctl "$@"
  [[ $CTL_RC -eq 0 ]] || { show "$CTL_OUT" "tallyctl stdout"; show "$CTL_ERR" "tallyctl stderr"; fail "tallyctl ${*:2} exited $CTL_RC"; }
}

# ctl_expect REGEX WHAT: tallyctl's stdout must have a line matching REGEX
ctl_expect() {
  grep -qE -- "$1" "$CTL_OUT" || { show "$CTL_OUT" "tallyctl stdout"; fail "tallyctl output lacks $2 ('$1')"; }
  pass "tallyctl shows $2: $(grep -E -- "$1" "$CTL_OUT" | head -n 1)"
}

# ctl_refused TEXT: tallyctl must have failed (non-zero, not killed) with one line containing TEXT
ctl_refused() {
  [[ $CTL_RC -ne 0 && $CTL_RC -ne 124 && $CTL_RC -ne 137 ]] || fail "tallyctl exited $CTL_RC (expected a failure)"
  grep -qF -- "$1" "$CTL_ERR" || { show "$CTL_ERR" "tallyctl stderr"; fail "tallyctl's stderr does not contain '$1'"; }
  [[ $(wc -l <"$CTL_ERR") -eq 1 ]] || { show "$CTL_ERR" "tallyctl stderr"; fail "tallyctl's reason is not one line"; }
  pass "tallyctl exited $CTL_RC: $(cat "$CTL_ERR")"
}

case_operations_status() {
  start_tallyd
  [[ -S $ADMIN_SOCK ]] || fail "no control socket at $ADMIN_SOCK"
  local mode
  mode=$(stat -c %a "$ADMIN_SOCK")
  [[ $mode == 600 ]] || fail "the control socket has mode $mode (expected 600)"
  pass "the control socket has mode 600"
  ctl_ok status status
  if gpu_visible; then
    ctl_expect '^gpus +[1-9]' "the GPUs"
  else
    ctl_expect '^gpus +0$' "0 GPUs"
  fi
  ctl_expect '^draining +no$' "not draining"
  ctl_expect '^tenants +0$' "0 tenants"
  ctl_expect '^version +[0-9]' "the version"
  ctl_ok tenants tenants
  ctl_expect '^ID +NAME +PRIORITY +MEMORY +STREAMS +CONNECTED +BUSY-IN +CALLBACKS-OWED +PEER$' "the tenant table's header"
  [[ $(wc -l <"$CTL_OUT") -eq 1 ]] || { show "$CTL_OUT" "tallyctl stdout"; fail "the tenant table is not empty"; }
  pass "the tenant table is empty"
  ctl_ok stats stats
  ctl_expect '^ID +NAME +CALLS +LAUNCHES +SLICED +PTB +RETREATS +CHAINED +HELD +HELD<10us/100us/1ms/10ms/more +THROTTLED +SYNC-WAITS\(mean\) +H2D +D2H$' "the stats table's header"
  [[ $(wc -l <"$CTL_OUT") -eq 1 ]] || { show "$CTL_OUT" "tallyctl stdout"; fail "the stats table is not empty"; }
  pass "the stats table is empty"
  stop_tallyd
  [[ ! -e $ADMIN_SOCK ]] || fail "tallyd left its control socket $ADMIN_SOCK behind"
  pass "tallyd removed its control socket"
}

case_operations_drain() {
  gpu_visible && skip "a GPU is visible; this test expects 'no GPU' after undrain"
  need_program
  start_tallyd
  ctl_ok drain drain
  expect_log "admin uid=$(id -u) pid=[0-9]+: drain: new tenants are refused" "the drain with the admin's uid"
  ctl_ok status-drained status
  ctl_expect '^draining +yes' "draining"
  expect_refused drained "unix:$SOCK" "tallyd is draining"
  expect_log "refused unix pid=[0-9]+ .*: tallyd is draining" "the refusal while draining"
  ctl_ok undrain undrain
  expect_log "admin uid=$(id -u) pid=[0-9]+: undrain: new tenants are admitted" "the undrain with the admin's uid"
  expect_refused undrained "unix:$SOCK" "$NO_GPU_MSG"
  ctl_ok status-undrained status
  ctl_expect '^draining +no$' "not draining"
  stop_tallyd
}

case_operations_evict() {
  start_tallyd
  ctl evict evict 12345
  ctl_refused "no tenant 12345"
  expect_log "admin uid=$(id -u) pid=[0-9]+: evict 12345: no such tenant" "the evict with the admin's uid"
  assert_tallyd_alive "after the evict of an unknown tenant"
  stop_tallyd
}

case_operations_no_socket() {
  ADMIN_SOCK=$TMPD/missing.sock
  ctl missing status
  ctl_refused "cannot reach tallyd's control socket at $ADMIN_SOCK: "
}

# ---- TLS ------------------------------------------------------------------------------------

# make_certs DIR: a CA, a second (wrong) CA, a server certificate for localhost signed by the CA,
# the same signed by the wrong CA, a self-signed one, an expired one, and a client certificate.
make_certs() {
  local d=$1
  mkdir -p "$d/db/new" && : >"$d/db/index.txt" && echo 01 >"$d/db/serial"
  ossl() { openssl "$@" 2>>"$d/openssl.log" || fail "openssl $1 failed (see $d/openssl.log)"; }
  for ca in ca wrong; do
    ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=tally test $ca" \
      -keyout "$d/$ca.key" -out "$d/$ca.pem"
  done
  local ext="subjectAltName=DNS:localhost,IP:127.0.0.1"
  for name in server client; do
    ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=tally-$name" -addext "$ext" \
      -keyout "$d/$name.key" -out "$d/$name.csr"
    ossl x509 -req -in "$d/$name.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 -copy_extensions copy \
      -out "$d/$name.pem"
  done
  ossl x509 -req -in "$d/server.csr" -CA "$d/wrong.pem" -CAkey "$d/wrong.key" -CAcreateserial -days 2 \
    -copy_extensions copy -out "$d/server-wrong.pem"
  ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=localhost" -addext "$ext" \
    -keyout "$d/self.key" -out "$d/self.pem"
  cat >"$d/ca.cnf" <<EOF_CA
[ca]
default_ca = test
[test]
database = $d/db/index.txt
new_certs_dir = $d/db/new
serial = $d/db/serial
default_md = sha256
policy = any
copy_extensions = copy
[any]
commonName = supplied
EOF_CA
  ossl ca -batch -config "$d/ca.cnf" -cert "$d/ca.pem" -keyfile "$d/ca.key" -in "$d/server.csr" \
    -startdate 20200101000000Z -enddate 20200102000000Z -out "$d/expired.pem"
}

TLS_PORT=""
start_tls_tallyd() {  # start_tls_tallyd CERT KEY [EXTRA_ARGS...]
  local cert=$1 key=$2
  shift 2
  TLS_PORT=$(pick_port) || fail "no free TCP port"
  start_tallyd --tls-cert "$cert" --tls-key "$key" --listen "tls://127.0.0.1:$TLS_PORT" "$@"
  local deadline=$(($(now_ms) + 5000))
  until tcp_listening "$TLS_PORT"; do
    (($(now_ms) < deadline)) || fail "tallyd did not listen on tls://127.0.0.1:$TLS_PORT"
    sleep 0.05
  done
}

case_security_tls() {
  need_program
  command -v openssl >/dev/null || fail "openssl (the command) is needed to make test certificates"
  local c=$TMPD/certs
  make_certs "$c"
  pass "test certificates made"

  start_tls_tallyd "$c/server.pem" "$c/server.key"
  CLIENT_ENV=(TALLY_CA="$c/ca.pem")
  expect_past_auth tls-ok "tls://localhost:$TLS_PORT"
  expect_log "tls 127\.0\.0\.1:[0-9]+" "a TLS peer"
  CLIENT_ENV=(TALLY_CA="$c/wrong.pem")
  expect_refused tls-wrong-ca "tls://localhost:$TLS_PORT" "unable to get local issuer certificate"
  CLIENT_ENV=(TALLY_CA="$c/ca.pem" TALLY_TLS_NAME=not-the-server)
  expect_refused tls-wrong-name "tls://localhost:$TLS_PORT" "TLS: "
  CLIENT_ENV=()
  expect_refused tls-no-ca "tls://localhost:$TLS_PORT" "needs TALLY_CA"
  expect_refused plain-to-tls "tcp://127.0.0.1:$TLS_PORT" "tallyd"
  expect_log "tls 127\\.0\\.0\\.1:[0-9]+: refused: TLS handshake" "failed TLS handshakes, with the peer"
  CLIENT_ENV=(TALLY_CA="$c/ca.pem")
  expect_past_auth tls-after-garbage "tls://localhost:$TLS_PORT"
  assert_tallyd_alive "after the TLS failures"
  stop_tallyd

  for bad in server-wrong:unable self:self-signed expired:expired; do
    local cert=${bad%%:*} text=${bad#*:}
    local key=$c/server.key
    [[ $cert == self ]] && key=$c/self.key
    start_tls_tallyd "$c/$cert.pem" "$key"
    CLIENT_ENV=(TALLY_CA="$c/ca.pem")
    expect_refused "tls-$cert" "tls://localhost:$TLS_PORT" "$text"
    stop_tallyd
  done

  # Mutual TLS: a client certificate signed by the client CA is required.
  start_tls_tallyd "$c/server.pem" "$c/server.key" --tls-client-ca "$c/ca.pem"
  CLIENT_ENV=(TALLY_CA="$c/ca.pem")
  expect_refused mtls-no-cert "tls://localhost:$TLS_PORT" "tallyd"
  CLIENT_ENV=(TALLY_CA="$c/ca.pem" TALLY_CERT="$c/client.pem" TALLY_KEY="$c/client.key")
  expect_past_auth mtls-ok "tls://localhost:$TLS_PORT"
  expect_log "tls 127\.0\.0\.1:[0-9]+ .*CN=tally-client" "the client certificate's subject"
  stop_tallyd

  # A tenant rule that names the client certificate's subject, with require_auth.
  write_config "$TMPD/subject.toml" "require_auth = true" "
[[tenant]]
name = \"cert-client\"
tls_subject = \"CN=tally-client\"
allowed_priority = \"high\""
  start_tls_tallyd "$c/server.pem" "$c/server.key" --tls-client-ca "$c/ca.pem" --config "$TMPD/subject.toml"
  CLIENT_ENV=(TALLY_CA="$c/ca.pem" TALLY_CERT="$c/client.pem" TALLY_KEY="$c/client.key" TALLY_PRIORITY=high)
  expect_past_auth mtls-subject-rule "tls://localhost:$TLS_PORT"
  expect_log "authenticated as tenant cert-client" "the tenant named by its certificate"
  stop_tallyd

  # Tokens and priorities work over TLS as over any transport.
  write_config "$TMPD/tallyd.toml" "require_auth = true"
  start_tls_tallyd "$c/server.pem" "$c/server.key" --config "$TMPD/tallyd.toml"
  CLIENT_ENV=(TALLY_CA="$c/ca.pem" TALLY_TOKEN="not-a-known-token")
  expect_refused tls-bad-token "tls://localhost:$TLS_PORT" "unknown token"
  CLIENT_ENV=(TALLY_CA="$c/ca.pem" TALLY_TOKEN="$TOKEN_B" TALLY_PRIORITY=high)
  expect_refused tls-disallowed-priority "tls://localhost:$TLS_PORT" "priority"
  stop_tallyd

  # Plain TCP is for loopback only unless allowed explicitly.
  "$TALLYD" --listen "tcp://0.0.0.0:$(pick_port)" --admin "" >"$TMPD/plain.log" 2>&1 && fail "tallyd served plain TCP on 0.0.0.0"
  grep -q "plain TCP carries tokens and data in clear" "$TMPD/plain.log" || fail "no reason given for refusing plain TCP"
  pass "tallyd refuses a non-loopback plain-TCP listener: $(grep -o 'plain TCP[^;]*' "$TMPD/plain.log" | head -n 1)"
  CLIENT_ENV=()
}

case_operations_metrics() {
  local mport
  mport=$(pick_port) || fail "no free TCP port"
  start_tallyd --metrics "127.0.0.1:$mport"
  wait_log "metrics on http://127.0.0.1:$mport/metrics" 5 || fail "tallyd did not announce its metrics endpoint"
  python3 - "$mport" <<'EOF_PY' || fail "the metrics endpoint"
import re, sys, urllib.request, urllib.error
port = sys.argv[1]
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
    assert r.status == 200, r.status
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers["Content-Type"]
    text = r.read().decode()
sample = re.compile(r'^[a-z_]+(\{[^}]*\})? [-+0-9.eE]+(Inf)?$')
for line in text.splitlines():
    assert line.startswith("# HELP ") or line.startswith("# TYPE ") or sample.match(line), f"bad line: {line!r}"
for want in ("tally_up 1", "tally_tenants 0", "tally_draining 0", "# TYPE tally_tenant_queueing_delay_seconds histogram",
             "# TYPE tally_gpu_sms_kept_from_best_effort gauge", "# TYPE tally_gpu_streams gauge",
             "# TYPE tally_tenant_chained_launches_total counter",
             "tally_gpu_hardware_queues 8"):
    assert want in text, f"missing {want!r}"
try:
    urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=5)
    raise SystemExit("GET /nothing did not fail")
except urllib.error.HTTPError as e:
    assert e.code == 404, e.code
print("ok: /metrics is valid exposition text with tally_up 1 and tally_tenants 0; other paths are 404")
EOF_PY
  assert_tallyd_alive "after the metrics requests"
  stop_tallyd
}

case $CASE in
  no_server) case_no_server ;;
  no_gpu) case_no_gpu ;;
  garbage_peer) case_garbage_peer ;;
  tallyd_dies) case_tallyd_dies ;;
  version_mismatch) case_version_mismatch ;;
  security_killed_mid_handshake) case_killed_mid_handshake ;;
  security_tokens) case_security_tokens ;;
  security_require_auth) case_security_require_auth ;;
  security_priority) case_security_priority ;;
  security_cap_priority) case_security_cap_priority ;;
  security_uid_rule) case_security_uid_rule ;;
  security_bad_config) case_security_bad_config ;;
  security_tls) case_security_tls ;;
  security_handshake_timeout) case_security_handshake_timeout ;;
  security_max_connections) case_security_max_connections ;;
  security_socket_dir) case_security_socket_dir ;;
  security_anonymous_tcp) case_security_anonymous_tcp ;;
  security_quarantine) case_security_quarantine ;;
  operations_status) case_operations_status ;;
  operations_drain) case_operations_drain ;;
  operations_evict) case_operations_evict ;;
  operations_no_socket) case_operations_no_socket ;;
  operations_metrics) case_operations_metrics ;;
  *) echo "unknown case '$CASE'" >&2; exit 2 ;;
esac
say "PASS: $CASE"
