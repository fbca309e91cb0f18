#!/usr/bin/env bash
# Where an inference tenant's time goes (issue #8): runs one client through a private tallyd with
# both call traces on (TALLY_TRACE, --trace-calls), the client's GPU hidden when root, and prints
# the per-stage report. The default client is the isolation benchmark's high-priority client
# alone (bench/isolation/hp_infer: ~1 ms open-loop requests of 8 kernels + a sync).
#
#   bench/trace/run_trace.sh <build dir> [out dir] [-- client command...]
#
# Writes client.tsv, tallyd.tsv, report.json and tallyd.log to the out dir (default: a temp dir).
# TRACE_TRANSPORT=tcp: the client reaches tallyd over TCP loopback instead of the Unix socket.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
[[ $# -ge 1 && -d $1 ]] || { echo "usage: $0 <build dir> [out dir] [-- client command...]" >&2; exit 2; }
BUILD=$(cd "$1" && pwd); shift
OUT=${1:-$(mktemp -d)}; [[ $# -ge 1 && $1 != -- ]] && shift
[[ ${1:-} == -- ]] && shift
mkdir -p "$OUT"
CLIENT=("$@")
[[ ${#CLIENT[@]} -eq 0 ]] && CLIENT=("$BUILD/bench/isolation/hp_infer" --rate 1000 --seconds 3 --seed 1)
nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU visible"; exit 77; }

SOCK=$OUT/tallyd.sock
SERVER="unix:$SOCK"
LISTEN=(--listen "$SERVER")
if [[ ${TRACE_TRANSPORT:-unix} == tcp ]]; then
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  SERVER="tcp://127.0.0.1:$PORT"
  # An anonymous TCP peer may ask for high priority only when the configuration allows it.
  printf 'allow_anonymous_high_priority = true\n' >"$OUT/tallyd.toml"
  LISTEN+=(--listen "$SERVER" --config "$OUT/tallyd.toml")
fi
rm -f "$SOCK" "$OUT/client.tsv" "$OUT/tallyd.tsv"
"$BUILD/server/tallyd" "${LISTEN[@]}" --trace-calls "$OUT/tallyd.tsv" >"$OUT/tallyd.log" 2>&1 &
TALLYD=$!
trap 'kill $TALLYD 2>/dev/null; wait $TALLYD 2>/dev/null' EXIT
for _ in $(seq 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || { echo "tallyd did not start; $OUT/tallyd.log" >&2; exit 1; }

HIDE=()
[[ $(id -u) -eq 0 ]] && HIDE=(unshare -m bash "$ROOT/tests/gpu/hide_gpu.sh" "$OUT/olddev")
"${HIDE[@]}" env LD_PRELOAD="$BUILD/client/libtally_client.so" TALLY_SERVER="$SERVER" TALLY_PRIORITY=high \
  TALLY_TRACE="$OUT/client.tsv" "${CLIENT[@]}" >"$OUT/client.out" 2>&1
rc=$?
kill "$TALLYD"; wait "$TALLYD" 2>/dev/null; trap - EXIT
[[ $rc -eq 0 ]] || { echo "client exited $rc; $OUT/client.out" >&2; tail -5 "$OUT/client.out" >&2; }
python3 "$HERE/trace_report.py" "$OUT/client.tsv" "$OUT/tallyd.tsv" --json "$OUT/report.json"
