#!/usr/bin/env bash
# The isolation benchmark (issue #4): an inference-like high-priority client (hp_infer) next to a
# training-like best-effort client (be_train, built with PTX and SASS-only), under each system,
# on the same Poisson schedule. Results: <out>/runs.jsonl (one line per run), <out>/clocks.csv.
# Then: python3 bench/isolation/report.py <out>/runs.jsonl --markdown docs/benchmarks.md --plot PNG
#
#   bench/isolation/run.sh <build dir> <out dir> [options]
#     --seconds S     length of each run (default 5)
#     --repeats R     repetitions of the whole matrix (default 3)
#     --rho X         HP load as a fraction of its solo service rate (default 0.5)
#     --be-lead S     BE runs this long before HP starts (default 1; 0: both start together)
#     --sweep "a b"   also run native and tally-priority at these loads (PTX build, one repeat)
#     --systems "…"   subset of: native mps mps-prio tally-passthrough tally-priority
#                     tally-no-gate tally-no-transforms tally-no-stream-priorities
#
# Needs root for MPS (private pipe directory; the daemon is stopped on exit). Never changes
# clocks, compute mode or MIG.
set -euo pipefail

[[ $# -ge 2 ]] || { sed -n 2,16p "$0"; exit 2; }
BUILD=$(cd "$1" && pwd)
OUT=$2
shift 2
SECONDS_PER_RUN=5
REPEATS=3
RHO=0.5
BE_LEAD=1
SWEEP=""
SYSTEMS="native mps mps-prio tally-passthrough tally-priority tally-no-gate tally-no-transforms tally-no-stream-priorities"
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --rho) RHO=$2; shift 2 ;;
    --be-lead) BE_LEAD=$2; shift 2 ;;
    --sweep) SWEEP=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

BIN=$BUILD/bench/isolation
TALLYD=$BUILD/server/tallyd
CLIENT=$BUILD/client/libtally_client.so
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUNS=$OUT/runs.jsonl
: >"$RUNS"
WORK=$(mktemp -d /tmp/tally-isolation.XXXXXX)
CACHE=$WORK/cache
SOCK=$WORK/tallyd.sock
TALLYD_PID=""
MPS_ON=0

log() { echo "[isolation] $*" >&2; }

stop_tallyd() {
  if [[ -n $TALLYD_PID ]]; then
    kill -TERM "$TALLYD_PID" 2>/dev/null || true
    wait "$TALLYD_PID" 2>/dev/null || true
    TALLYD_PID=""
  fi
}
stop_mps() {
  if [[ $MPS_ON == 1 ]]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$WORK/mps nvidia-cuda-mps-control >/dev/null 2>&1 || true
    sleep 1
    MPS_ON=0
  fi
}
cleanup() {
  stop_tallyd
  stop_mps
  [[ -n ${CLOCK_PID:-} ]] && kill "$CLOCK_PID" 2>/dev/null || true
}
trap cleanup EXIT

start_tallyd() {  # extra tallyd flags...
  stop_tallyd
  "$TALLYD" --listen "unix:$SOCK" --admin "" --cache-dir "$CACHE" "$@" >>"$OUT/tallyd.log" 2>&1 &
  TALLYD_PID=$!
  for _ in $(seq 1 100); do [[ -S $SOCK ]] && return 0; sleep 0.05; done
  log "tallyd did not start"; tail -5 "$OUT/tallyd.log" >&2; exit 1
}
start_mps() {
  mkdir -p "$WORK/mps" "$WORK/mpslog"
  CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_LOG_DIRECTORY=$WORK/mpslog nvidia-cuda-mps-control -d
  MPS_ON=1
  sleep 1
}

# Environment prefix of a client under a system: "hp" or "be".
client_env() {
  local system=$1 role=$2
  case $system in
    native) echo "" ;;
    mps) echo "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps" ;;
    mps-prio)
      if [[ $role == be ]]; then echo "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_CLIENT_PRIORITY=1"
      else echo "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_CLIENT_PRIORITY=0"; fi ;;
    tally-*)
      local prio=best-effort
      [[ $role == hp ]] && prio=high
      echo "LD_PRELOAD=$CLIENT TALLY_SERVER=unix:$SOCK TALLY_TENANT=$role TALLY_PRIORITY=$prio" ;;
  esac
}

tally_flags() {
  case $1 in
    tally-passthrough) echo "--policy passthrough" ;;
    tally-priority) echo "--policy priority" ;;
    tally-no-gate) echo "--policy priority --no-gate" ;;
    tally-no-transforms) echo "--policy priority --no-transforms" ;;
    tally-no-stream-priorities) echo "--policy priority --no-stream-priorities" ;;
  esac
}

prepare() {  # system
  case $1 in
    mps|mps-prio) stop_tallyd; [[ $MPS_ON == 1 ]] || start_mps ;;
    tally-*) stop_mps; start_tallyd $(tally_flags "$1") ;;
    *) stop_tallyd; stop_mps ;;
  esac
}

record() {  # repeat build system rho hp_json be_json
  echo "{\"repeat\":$1,\"be_build\":\"$2\",\"system\":\"$3\",\"rho\":$4,\"hp\":${5:-null},\"be\":${6:-null}}" >>"$RUNS"
}

# One co-located run, in steady state: training is already running when inference starts. BE
# starts first and counts iterations only after BE_LEAD seconds (past its warm-up), HP starts
# BE_LEAD seconds after it; both then measure for SECONDS_PER_RUN (windows aligned to ~0.1 s).
pair() {  # repeat build system rho rate
  local repeat=$1 build=$2 system=$3 rho=$4 rate=$5
  local be_out=$WORK/be.json hp_out=$WORK/hp.json
  env $(client_env "$system" be) "$BIN/be_train_$build" --seconds "$SECONDS_PER_RUN" --lead "$BE_LEAD" \
    >"$be_out" 2>>"$OUT/clients.log" &
  local be_pid=$!
  sleep "$BE_LEAD"
  env $(client_env "$system" hp) "$BIN/hp_infer" --rate "$rate" --seconds "$SECONDS_PER_RUN" --seed "$repeat" \
    >"$hp_out" 2>>"$OUT/clients.log" || log "hp failed under $system"
  wait "$be_pid" || log "be failed under $system"
  record "$repeat" "$build" "$system" "$rho" "$(cat "$hp_out")" "$(cat "$be_out")"
  log "$system/$build rho=$rho: hp $(cat "$hp_out") be $(cat "$be_out")"
}

nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv -lms 1000 \
  >"$OUT/clocks.csv" 2>/dev/null &
CLOCK_PID=$!
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1 || true

log "HP solo service time (closed loop, 3 s)"
SOLO=$("$BIN/hp_infer" --solo 3)
echo "$SOLO" >"$OUT/hp_solo.json"
MEAN=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['service_us']['mean'])" "$SOLO")
rate_for() { python3 -c "print($1 / ($MEAN / 1e6))"; }
RATE=$(rate_for "$RHO")
log "solo mean service ${MEAN} µs -> ${RATE} req/s at rho $RHO"

# Warm tallyd's caches (compiled variants, learned durations) with a BE run under the priority
# policy, so that measured runs start as a long-running tallyd would be.
start_tallyd --policy priority
env $(client_env tally-priority be) "$BIN/be_train_ptx" --seconds 2 >/dev/null 2>>"$OUT/clients.log"
env $(client_env tally-priority be) "$BIN/be_train_ptx" --seconds 2 >/dev/null 2>>"$OUT/clients.log"
stop_tallyd

for repeat in $(seq 1 "$REPEATS"); do
  prepare native
  hp=$("$BIN/hp_infer" --rate "$RATE" --seconds "$SECONDS_PER_RUN" --seed "$repeat")
  record "$repeat" none hp-alone "$RHO" "$hp" null
  # HP alone through tallyd: what remoting costs it, apart from any co-location.
  prepare tally-priority
  hp=$(env $(client_env tally-priority hp) "$BIN/hp_infer" --rate "$RATE" --seconds "$SECONDS_PER_RUN" --seed "$repeat")
  record "$repeat" none tally-hp-alone "$RHO" "$hp" null
  for build in ptx sass; do
    be=$("$BIN/be_train_$build" --seconds "$SECONDS_PER_RUN")
    record "$repeat" "$build" be-alone "$RHO" null "$be"
    for system in $SYSTEMS; do
      prepare "$system"
      pair "$repeat" "$build" "$system" "$RHO" "$RATE"
    done
  done
done

for rho in $SWEEP; do
  rate=$(rate_for "$rho")
  prepare native
  hp=$("$BIN/hp_infer" --rate "$rate" --seconds "$SECONDS_PER_RUN" --seed 1)
  record 1 none hp-alone "$rho" "$hp" null
  for system in native tally-priority; do
    prepare "$system"
    pair 1 ptx "$system" "$rho" "$rate"
  done
done
stop_tallyd
stop_mps
log "done: $RUNS"
