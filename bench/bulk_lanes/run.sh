#!/usr/bin/env bash
# Bulk lanes (issue #8): bandwidth of pinned host<->device copies natively and through one tallyd
# over TCP and TLS with 0, 2 and 4 bulk lanes (TALLY_BULK_LANES), in one run, rounds interleaved.
#
#   bench/bulk_lanes/run.sh <build dir> <out dir>
#
# Environment: LANES_COUNTS="0 2 4", LANES_ROUNDS=2, LANES_SIZES (bytes, comma-separated;
# default 1, 4, 16 and 64 MiB), LANES_BUDGET_S=0.6 (time per size and direction).
# Writes <out>/<mode>-<lanes>-<round>.json (tally_microbench lines), native-<round>.json,
# tallyd.log; then: python3 bench/bulk_lanes/report.py <out> --markdown M --json J --plot P.
# Exit: 0 done, 2 usage, 77 no GPU (nothing run).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../../scripts/tally_lib.sh
source "$SRC/scripts/tally_lib.sh"
[[ $# -eq 2 ]] || { sed -n 2,12p "$0" >&2; exit 2; }
BUILD=$(cd "$1" && pwd) || exit 2
OUT=$2
BENCH=$BUILD/bench/tally_microbench
[[ -x $BENCH && -x $BUILD/server/tallyd && -f $BUILD/client/libtally_client.so ]] || { echo "not built in $BUILD" >&2; exit 2; }
reason=$(tl_gpu_skip_reason)
[[ -z $reason ]] || { echo "SKIP: no GPU visible ($reason)"; exit 77; }
command -v openssl >/dev/null || { echo "the openssl command is needed (a test certificate)" >&2; exit 2; }
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tally-lanes.XXXXXX")
TALLYD_PID=""
cleanup() { [[ -n $TALLYD_PID ]] && kill "$TALLYD_PID" 2>/dev/null && wait "$TALLYD_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 || { echo "openssl failed" >&2; exit 2; }
TCP=$(tl_free_port) TLS=$(tl_free_port)
"$BUILD/server/tallyd" --listen "tcp://127.0.0.1:$TCP" --listen "tls://127.0.0.1:$TLS" --tls-cert "$WORK/cert.pem" \
  --tls-key "$WORK/key.pem" --admin "" --bulk-lanes 8 >"$OUT/tallyd.log" 2>&1 &
TALLYD_PID=$!
for _ in $(seq 100); do grep -q "tallyd ready" "$OUT/tallyd.log" && break; sleep 0.1; done
grep -q "tallyd ready" "$OUT/tallyd.log" || { echo "tallyd did not start" >&2; exit 1; }
ARGS=(bandwidth --bw-sizes "${LANES_SIZES:-1048576,4194304,16777216,67108864}" --bw-kinds pinned --bw-dirs h2d,d2h
      --bw-budget-s "${LANES_BUDGET_S:-0.6}" --bw-min-reps 5)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for round in $(seq "${LANES_ROUNDS:-2}"); do
  timeout 300 "$BENCH" "${ARGS[@]}" >"$OUT/native-$round.json" 2>/dev/null
  for mode in tcp tls; do
    for lanes in ${LANES_COUNTS:-0 2 4}; do
      server="tcp://127.0.0.1:$TCP"
      [[ $mode == tls ]] && server="tls://localhost:$TLS"
      TALLY_BULK_LANES=$lanes TALLY_CA="$WORK/cert.pem" TALLY_SERVER=$server LD_PRELOAD="$BUILD/client/libtally_client.so" \
        timeout 300 "$BENCH" "${ARGS[@]}" >"$OUT/$mode-$lanes-$round.json" 2>"$OUT/$mode-$lanes-$round.err"
      echo "round $round: $mode with $lanes lanes done (exit $?)"
    done
  done
done
