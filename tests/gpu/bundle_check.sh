#!/usr/bin/env bash
# The relocatable bundle on a GPU host (issue #5): untars `ninja bundle`'s tarball into a fresh
# directory, checks that tallyd and the client resolve every library with an empty environment,
# starts that tallyd with a Unix socket, a TLS listener and a metrics endpoint, runs GPU suite
# programs through the bundle's client over both (TLS verified against the given CA), compares
# them with native runs, and asks tallyctl and the metrics endpoint about it.
#
#   tests/gpu/bundle_check.sh TARBALL PROGRAM_DIR CERT_DIR
#     PROGRAM_DIR  the GPU suite's gpu_* programs (linked against the application's libcudart)
#     CERT_DIR     ca.pem, server.pem, server.key (server certificate for localhost/127.0.0.1),
#                  other.pem (a CA that did not sign it)
# Exit: 0 all passed, 1 something failed, 77 no GPU visible.
set -uo pipefail
[[ $# -eq 3 ]] || { sed -n 2,11p "$0"; exit 2; }
TARBALL=$(realpath "$1") PROGRAMS=$(realpath "$2") CERTS=$(realpath "$3")
PROGRAM_LIST=${BUNDLE_CHECK_PROGRAMS:-"vector_add streams_events host_callbacks memcpy_2d"}
[[ -e /dev/nvidia0 ]] || { echo "SKIP: no GPU visible (no /dev/nvidia0)"; exit 77; }

WORK=$(mktemp -d /tmp/tally-bundle-check.XXXXXX)
TALLYD_PID=""
cleanup() { [[ -n $TALLYD_PID ]] && kill "$TALLYD_PID" 2>/dev/null && wait "$TALLYD_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
PASS=0 FAIL=0
check() {  # check NAME COMMAND...: PASS if the command succeeds
  local name=$1; shift
  if "$@"; then echo "PASS $name"; PASS=$((PASS + 1)); else echo "FAIL $name"; FAIL=$((FAIL + 1)); return 1; fi
}

tar -C "$WORK" -xzf "$TARBALL"
ROOT=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d | head -1)
echo "bundle: $ROOT ($(du -sh "$ROOT" | cut -f1)) on $(. /etc/os-release && echo "$PRETTY_NAME")"
resolves() { ! env -i ldd "$1" | grep -q 'not found'; }
check "tallyd resolves its libraries with an empty environment" resolves "$ROOT/bin/tallyd"
check "the client resolves its libraries with an empty environment" resolves "$ROOT/lib/libtally_client.so"

PORT=$((20000 + RANDOM % 20000)) METRICS=$((20000 + RANDOM % 20000))
env -i PATH=/usr/bin:/bin "$ROOT/bin/tallyd" --listen "unix:$WORK/tallyd.sock" --listen "tls://127.0.0.1:$PORT" \
  --tls-cert "$CERTS/server.pem" --tls-key "$CERTS/server.key" --admin "unix:$WORK/admin.sock" \
  --metrics "127.0.0.1:$METRICS" --cache-dir "$WORK/cache" >"$WORK/tallyd.log" 2>&1 &
TALLYD_PID=$!
for _ in $(seq 1 100); do [[ -S $WORK/tallyd.sock ]] && break; sleep 0.05; done
check "bundled tallyd starts" test -S "$WORK/tallyd.sock"

run_client() {  # run_client PROGRAM URL
  env LD_PRELOAD="$ROOT/lib/libtally_client.so" TALLY_SERVER="$2" TALLY_CA="$CERTS/ca.pem" \
    TALLY_TENANT="bundle-$1" timeout 120 "$PROGRAMS/gpu_$1"
}
for prog in $PROGRAM_LIST; do
  timeout 120 "$PROGRAMS/gpu_$prog" >"$WORK/$prog.native" 2>/dev/null
  for url in "unix:$WORK/tallyd.sock" "tls://127.0.0.1:$PORT"; do
    run_client "$prog" "$url" >"$WORK/$prog.out" 2>"$WORK/$prog.err"
    check "$prog over ${url%%:*}: same output as native" cmp -s "$WORK/$prog.native" "$WORK/$prog.out" ||
      { diff "$WORK/$prog.native" "$WORK/$prog.out" | head -5; tail -3 "$WORK/$prog.err"; }
  done
done
# A client that does not trust tallyd's certificate gets an error, not a connection.
env LD_PRELOAD="$ROOT/lib/libtally_client.so" TALLY_SERVER="tls://127.0.0.1:$PORT" TALLY_CA="$CERTS/other.pem" \
  timeout 60 "$PROGRAMS/gpu_vector_add" >/dev/null 2>"$WORK/untrusted.err"
check "a client without the CA is refused" grep -qi "certificate\|tls" "$WORK/untrusted.err"

"$ROOT/bin/tallyctl" --socket "$WORK/admin.sock" status >"$WORK/status.txt" 2>&1
check "tallyctl status reaches the bundled tallyd (1 GPU)" grep -Eq "^gpus +1" "$WORK/status.txt"
cat "$WORK/status.txt"
if command -v curl >/dev/null; then
  curl -s "http://127.0.0.1:$METRICS/metrics" >"$WORK/metrics.txt"
  check "metrics endpoint answers" grep -q "^tally_" "$WORK/metrics.txt"
fi
echo "--- tallyd log (last lines)"
tail -5 "$WORK/tallyd.log"
echo "bundle check: $PASS passed, $FAIL failed"
[[ $FAIL -eq 0 ]]
