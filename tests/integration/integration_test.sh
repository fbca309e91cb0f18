#!/usr/bin/env bash
# Integration tests of tallyd + libtally_client.so that need no GPU (registered by
# tests/integration/CMakeLists.txt, label "integration").
#
#   integration_test.sh CASE TALLYD CLIENT_LIB PROGRAM SCHEMA_DIR [CUDA_LIB_DIR]
#
#   CASE         no_server | no_gpu | garbage_peer | version_mismatch
#   TALLYD       the tallyd executable
#   CLIENT_LIB   libtally_client.so (LD_PRELOADed into PROGRAM)
#   PROGRAM      an nvcc-built (-cudart shared) program, e.g. tests/gpu/gpu_vector_add;
#                "" when the CUDA programs are not built
#   SCHEMA_DIR   the repository's schema/ (for `capnp encode/decode`)
#   CUDA_LIB_DIR appended to LD_LIBRARY_PATH so PROGRAM finds libcudart
#
# Exit status: 0 passed, 1 failed, 77 skipped (the reason is printed).
# Every wait is bounded: a client run gets 10 s, tallyd's start 10 s, its stop 5 s.
set -uo pipefail

[[ $# -ge 5 ]] || { echo "usage: $0 CASE TALLYD CLIENT_LIB PROGRAM SCHEMA_DIR [CUDA_LIB_DIR]" >&2; exit 2; }
CASE=$1 TALLYD=$2 CLIENT_LIB=$3 PROGRAM=$4 SCHEMA_DIR=$5 CUDA_LIB_DIR=${6:-}

# The developer's own client settings must not leak into the tests.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^TALLY_' || true)

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RAW_PEER=$HERE/raw_peer.py
NO_GPU_MSG='no GPU is visible to tallyd'
CLIENT_TIMEOUT=10

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-it.XXXXXX") || { echo "FAIL: mktemp" >&2; exit 1; }
SOCK=$TMPD/t.sock
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

start_tallyd() {
  [[ -x $TALLYD ]] || fail "tallyd not built: $TALLYD"
  local _attempt
  for _attempt in 1 2 3; do
    PORT=$(pick_port) || fail "no free TCP port"
    "$TALLYD" --listen "unix:$SOCK" --listen "tcp://127.0.0.1:$PORT" >"$LOG" 2>&1 &
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
# run_client NAME SERVER_URL: runs PROGRAM preloaded; sets RC, MS (elapsed), OUT, ERR
run_client() {
  local name=$1 url=$2
  OUT=$TMPD/$name.out ERR=$TMPD/$name.err
  local t0
  t0=$(now_ms)
  RC=0
  timeout -k 2 "$CLIENT_TIMEOUT" env LD_PRELOAD="$CLIENT_LIB" TALLY_SERVER="$url" TALLY_TENANT="it-$name" \
    LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CUDA_LIB_DIR" \
    "$PROGRAM" >"$OUT" 2>"$ERR" </dev/null || RC=$?
  MS=$(($(now_ms) - t0))
  say "client $name (TALLY_SERVER=$url): exit $RC after ${MS} ms"
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

case $CASE in
  no_server) case_no_server ;;
  no_gpu) case_no_gpu ;;
  garbage_peer) case_garbage_peer ;;
  version_mismatch) case_version_mismatch ;;
  *) echo "unknown case '$CASE'" >&2; exit 2 ;;
esac
say "PASS: integration.$CASE"
