#!/usr/bin/env bash
# A real CUDA program through a real tallyd whose driver is the fake GPU of tests/fuzz/fake_gpu
# (host memory stands in for device memory; kernels do not run): what needs no GPU can be
# checked in CI end to end — the client library, the wire over every transport, tallyd's
# handlers.
#
#   fake_gpu_test.sh TALLYD CLIENT_LIB FAKE_DRIVER_DIR PROGRAM [ARGS...]
#
# Runs PROGRAM (with ARGS) preloaded with CLIENT_LIB over a Unix socket, TCP and TLS (a
# certificate made here with openssl); each run must exit 0, print no FATAL line, and print the
# same as the others. FAKE_GPU_CLIENT_ENV="NAME=VALUE ..." is set for PROGRAM's runs (every
# other TALLY_* variable is cleared); FAKE_GPU_TALLYD_CONFIG is TOML given to tallyd (--config);
# FAKE_GPU_TCP_STDERR is a pattern the TCP and TLS runs must print on stderr;
# FAKE_GPU_UNIX_MIN_WORDS is how many round trips of the Unix-socket run at least must have
# ended on the GPU's completion word (TALLY_CLIENT_STATS' word_completions; TCP and TLS have
# none). Exit status: 0 passed, 1 failed, 77 skipped (the reason is printed).
set -uo pipefail
[[ $# -ge 4 ]] || { echo "usage: $0 TALLYD CLIENT_LIB FAKE_DRIVER_DIR PROGRAM [ARGS...]" >&2; exit 2; }
TALLYD=$1 CLIENT_LIB=$2 FAKE_DIR=$3
shift 3
PROGRAM=("$@")
[[ -x ${PROGRAM[0]} ]] || { echo "SKIP: ${PROGRAM[0]} not built"; exit 77; }
[[ -e $FAKE_DIR/libcuda.so.1 ]] || { echo "FAIL: no fake driver in $FAKE_DIR"; exit 1; }
command -v openssl >/dev/null || { echo "SKIP: the openssl command is needed for the TLS run"; exit 77; }
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^TALLY_' || true)

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-fake-gpu.XXXXXX") || exit 1
TALLYD_PID=""
cleanup() {
  [[ -n $TALLYD_PID ]] && kill -TERM "$TALLYD_PID" 2>/dev/null && wait "$TALLYD_PID" 2>/dev/null
  rm -rf "$TMPD"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$TMPD"/*.out "$TMPD"/*.err "$TMPD/tallyd.log"; do [[ -f $f ]] && { echo "--- $f"; tail -n 30 "$f"; }; done
  exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost -keyout "$TMPD/key.pem" -out "$TMPD/cert.pem" >/dev/null 2>&1 ||
  fail "openssl could not make a certificate"
TCP_PORT=$(free_port) TLS_PORT=$(free_port)
CONFIG_ARGS=()
if [[ -n ${FAKE_GPU_TALLYD_CONFIG:-} ]]; then
  printf '%s\n' "$FAKE_GPU_TALLYD_CONFIG" >"$TMPD/tallyd.toml"
  CONFIG_ARGS=(--config "$TMPD/tallyd.toml")
fi
LD_LIBRARY_PATH="$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$TALLYD" "${CONFIG_ARGS[@]}" --listen "unix:$TMPD/t.sock" \
  --listen "tcp://127.0.0.1:$TCP_PORT" --listen "tls://127.0.0.1:$TLS_PORT" \
  --tls-cert "$TMPD/cert.pem" --tls-key "$TMPD/key.pem" --log-level debug >"$TMPD/tallyd.log" 2>&1 &
TALLYD_PID=$!
for _ in $(seq 100); do grep -q "tallyd ready" "$TMPD/tallyd.log" && break; sleep 0.1; done
grep -q "tallyd ready" "$TMPD/tallyd.log" || fail "tallyd on the fake GPU did not get ready"

declare -A SERVERS=([unix]="unix:$TMPD/t.sock" [tcp]="tcp://127.0.0.1:$TCP_PORT" [tls]="tls://localhost:$TLS_PORT")
for transport in unix tcp tls; do
  rc=0
  # shellcheck disable=SC2086  # NAME=VALUE words
  timeout -k 2 30 env LD_PRELOAD="$CLIENT_LIB" TALLY_SERVER="${SERVERS[$transport]}" TALLY_CA="$TMPD/cert.pem" \
    TALLY_CLIENT_STATS="$TMPD/$transport.stats" \
    ${FAKE_GPU_CLIENT_ENV:-} "${PROGRAM[@]}" >"$TMPD/$transport.out" 2>"$TMPD/$transport.err" </dev/null || rc=$?
  [[ $rc -eq 0 ]] || fail "over $transport: exit $rc"
  ! grep -q FATAL "$TMPD/$transport.out" || fail "over $transport: a call failed"
  if [[ -n ${FAKE_GPU_TCP_STDERR:-} && $transport != unix ]]; then
    grep -qE "$FAKE_GPU_TCP_STDERR" "$TMPD/$transport.err" || fail "over $transport: stderr lacks '$FAKE_GPU_TCP_STDERR'"
  fi
  echo "ok: over $transport: $(tail -n 1 "$TMPD/$transport.out")"
  words=$(sed -n 's/.*"word_completions": \([0-9]*\).*/\1/p' "$TMPD/$transport.stats" 2>/dev/null)
  if [[ -n ${FAKE_GPU_UNIX_MIN_WORDS:-} ]]; then
    if [[ $transport == unix ]]; then
      [[ ${words:-0} -ge $FAKE_GPU_UNIX_MIN_WORDS ]] ||
        fail "over unix: ${words:-no} round trips ended on the completion word, expected at least $FAKE_GPU_UNIX_MIN_WORDS"
    else
      [[ ${words:-0} -eq 0 ]] || fail "over $transport: $words round trips ended on a completion word"
    fi
    echo "ok: over $transport: ${words:-0} round trips ended on the completion word"
  fi
  # The next run starts once tallyd let go of this one (its connection slots, with
  # FAKE_GPU_TALLYD_CONFIG's limits).
  runs=$((${runs:-0} + 1))
  for _ in $(seq 50); do [[ $(grep -c ") released:" "$TMPD/tallyd.log") -ge $runs ]] && break; sleep 0.1; done
done
cmp -s "$TMPD/unix.out" "$TMPD/tcp.out" || fail "the output over TCP differs from the one over the Unix socket"
cmp -s "$TMPD/unix.out" "$TMPD/tls.out" || fail "the output over TLS differs from the one over the Unix socket"
kill -0 "$TALLYD_PID" 2>/dev/null || fail "tallyd died"
if [[ ${FAKE_GPU_CLIENT_ENV:-} == *TALLY_BULK_LANES=[1-8]* ]]; then  # the lanes were used, not just asked for
  lanes=$(grep -c "bulk lane [0-9] joined" "$TMPD/tallyd.log")
  [[ $lanes -gt 0 ]] || fail "no bulk lane joined tallyd"
  echo "ok: $lanes bulk lanes joined tallyd"
fi
echo "PASS: ${PROGRAM[*]##*/} over unix, tcp and tls"
