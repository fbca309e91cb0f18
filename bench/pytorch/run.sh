#!/usr/bin/env bash
# PyTorch benchmarks: native vs. tallyd over a Unix socket vs. tallyd over TCP.
#
#   bench/pytorch/run.sh <build dir> <out dir>
#
# Runs bench/pytorch/torch_bench.py (every measure in its own process; see its docstring for
# the measures and the TORCH_BENCH_* sizes/repeats) once per mode: natively, then through a
# private tallyd (--listen unix:... --listen tcp://127.0.0.1:PORT) with the client in a mount
# namespace without the GPU and libcuda (when root; tests/gpu/hide_gpu.sh). Then
# bench/pytorch/report.py merges the runs. <out dir> receives:
#   torch_bench.<mode>.json   one run each          pytorch_bench.json  merged, + ratios to native
#   pytorch_bench.md          markdown table        pytorch_bench.png   plot (needs matplotlib)
#   torch_bench.log           stderr of every measure               tallyd.log
#
# Exit: 0 every measure of every mode produced results; 1 something failed (the JSON is still
# written); 2 usage; 77 no GPU visible or no CUDA-enabled torch (nothing run).
#
# Modes: native, uds, tcp, and delay<N> (a remote client: over TCP through
# bench/netdelay/delay_proxy on 127.0.0.1, which holds every byte N µs each way; delay0 is the
# proxy's own cost). With client statistics, each result says how many messages and round trips
# one step or request cost (a remote request should pay only its own synchronizing calls).
#
# Environment: TORCH_BENCH_MODES ["native uds tcp"], TORCH_BENCH_PYTHON [python3],
#   TORCH_BENCH_TALLYD_ARGS (extra tallyd options, e.g. "--policy priority"),
#   TORCH_BENCH_PRIORITY [best-effort] (the clients' TALLY_PRIORITY; "high" over TCP needs a
#   tallyd that allows it, e.g. --config with allow_anonymous_high_priority = true),
#   TORCH_BENCH_NO_HIDE=1 (debugging: clients see the GPU), TORCH_BENCH_CONFIG_TIMEOUT_S [300]
#   (hard limit per mode, above torch_bench.py's own TORCH_BENCH_DEADLINE_S [240]),
#   and the TORCH_BENCH_* knobs of torch_bench.py.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../../scripts/tally_lib.sh
source "$SRC/scripts/tally_lib.sh"

[[ $# -eq 2 ]] || { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "run.sh: build dir '$1' not found" >&2; exit 2; }
mkdir -p "$2" || { echo "run.sh: cannot create '$2'" >&2; exit 2; }
OUT=$(cd "$2" && pwd)
TALLYD=$BUILD/server/tallyd
CLIENT_LIB=$BUILD/client/libtally_client.so
PY=${TORCH_BENCH_PYTHON:-python3}
MODES=${TORCH_BENCH_MODES:-native uds tcp}
CONFIG_TIMEOUT=${TORCH_BENCH_CONFIG_TIMEOUT_S:-300}
PROXY=$BUILD/bench/netdelay/delay_proxy
PROXY_PID=""

reason=$(tl_gpu_skip_reason)
[[ -z $reason ]] || { echo "run.sh: SKIP: no GPU visible ($reason)"; exit 77; }
reason=$(tl_torch_skip_reason "$PY")
[[ -z $reason ]] || { echo "run.sh: SKIP: $reason"; exit 77; }
for m in $MODES; do
  case $m in
    native) ;;
    uds | tcp)
      [[ -x $TALLYD && -f $CLIENT_LIB ]] || { echo "run.sh: $TALLYD or $CLIENT_LIB not built" >&2; exit 2; } ;;
    delay[0-9]*)
      [[ $m =~ ^delay[0-9]+$ ]] || { echo "run.sh: mode '$m': expected delay<µs>" >&2; exit 2; }
      [[ -x $TALLYD && -f $CLIENT_LIB && -x $PROXY ]] ||
        { echo "run.sh: $TALLYD, $CLIENT_LIB or $PROXY not built" >&2; exit 2; } ;;
    *) echo "run.sh: unknown mode '$m' in TORCH_BENCH_MODES" >&2; exit 2 ;;
  esac
done

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-torch-bench.XXXXXX")
SOCK=$TMPD/tallyd.sock
LOG=$OUT/torch_bench.log
TALLYD_LOG=$OUT/tallyd.log
: >"$LOG"
: >"$TALLYD_LOG"
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  stop_proxy
  tl_stop_tallyd
  rm -rf "$TMPD"
}
# A delay proxy in front of tallyd's TCP port for mode delay<N>; PROXY_PORT is where clients go.
start_proxy() {  # delay_us
  PROXY_PORT=$(tl_free_port) || return 1
  "$PROXY" "$PROXY_PORT" 127.0.0.1 "$TL_PORT" "$1" >"$TMPD/proxy.out" 2>&1 &
  PROXY_PID=$!
  for _ in $(seq 50); do grep -q listening "$TMPD/proxy.out" 2>/dev/null && return 0; sleep 0.1; done
  echo "run.sh: the delay proxy did not start: $(tail -n 2 "$TMPD/proxy.out")" >&2
  return 1
}
stop_proxy() {
  [[ -n $PROXY_PID ]] || return 0
  kill "$PROXY_PID" 2>/dev/null
  wait "$PROXY_PID" 2>/dev/null
  PROXY_PID=""
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM

tl_libcuda_dir "$CLIENT_LIB" "$TMPD/libcuda"
tl_setup_hide "$TMPD" "${TORCH_BENCH_NO_HIDE:-}"
[[ -n $TL_HIDE_NOTE ]] && echo "run.sh: $TL_HIDE_NOTE" | tee -a "$LOG" >&2
read -r -a TALLYD_EXTRA <<<"$(tl_library_dir_args "${TORCH_BENCH_PYTHON:-python3}") ${TORCH_BENCH_TALLYD_ARGS:-}"

# Client statistics (calls/bytes) only when the client library knows the variable.
STATS=0
grep -aq TALLY_CLIENT_STATS "$CLIENT_LIB" 2>/dev/null && STATS=1
[[ $STATS -eq 0 ]] && echo "run.sh: note: libtally_client.so does not read TALLY_CLIENT_STATS; client_stats stay null" >&2

failed=0
for mode in $MODES; do
  echo "run.sh: $(date -u +%H:%M:%S) mode $mode" >&2
  out=$OUT/torch_bench.$mode.json
  rm -f "$out"
  common=(TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1)
  if [[ $mode == native ]]; then
    cmd=(env -u LD_PRELOAD -u TALLY_SERVER "${common[@]}")
  else
    tl_tallyd_alive || tl_start_tallyd "$TALLYD" "$SOCK" "$TALLYD_LOG" "${TALLYD_EXTRA[@]}" ||
      { echo "run.sh: tallyd did not start; mode $mode not run" >&2; failed=1; continue; }
    url="unix:$SOCK"
    [[ $mode == tcp ]] && url="tcp://127.0.0.1:$TL_PORT"
    if [[ $mode == delay* ]]; then
      start_proxy "${mode#delay}" || { failed=1; continue; }
      url="tcp://127.0.0.1:$PROXY_PORT"
    fi
    tl_client_env "$CLIENT_LIB" "$url" "torch-bench-$mode" "${TORCH_BENCH_PRIORITY:-best-effort}" "$TMPD/libcuda"
    cmd=()
    [[ $TL_HIDE -eq 1 ]] && cmd=(unshare -m bash -c "$TL_HIDE_SCRIPT" bash "$TL_OLDDEV")
    cmd+=(env "${common[@]}" "${TL_CLIENT_ENV[@]}")
    if [[ $STATS -eq 1 ]]; then
      mkdir -p "$OUT/client_stats"
      cmd+=("TORCH_BENCH_CLIENT_STATS_DIR=$OUT/client_stats")
    fi
  fi
  timeout -k 10 "$CONFIG_TIMEOUT" "${cmd[@]}" "$PY" "$HERE/torch_bench.py" all --out "$out" --label "$mode" --log "$LOG"
  rc=$?
  if [[ $rc -ne 0 ]]; then
    failed=1
    echo "run.sh: mode $mode exited $rc$([[ $rc -eq 124 ]] && echo " (timed out after ${CONFIG_TIMEOUT}s)")" >&2
  fi
  stop_proxy
  [[ -f $out ]] || { echo "run.sh: mode $mode wrote no results" >&2; failed=1; }
done
tl_stop_tallyd

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
rev=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 "$HERE/report.py" --out-dir "$OUT" --meta "gpu=$gpu" --meta "git=$rev" --meta "hidden=$TL_HIDE" \
  --meta "tallyd_args=${TORCH_BENCH_TALLYD_ARGS:-}" --meta "modes=$MODES" || failed=1
exit "$failed"
