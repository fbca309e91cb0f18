#!/usr/bin/env bash
# The isolation benchmark (issues #4, #9): an inference-like high-priority client (hp_infer) next
# to a training-like best-effort client (be_train, built with PTX and SASS-only), for several
# HP/BE pairs, under each system, on the same Poisson schedule. Results: <out>/runs.jsonl (one
# line per run), <out>/clocks.csv. Then:
#   python3 bench/isolation/report.py <out>/runs.jsonl --markdown docs/benchmarks.md --plot PNG --json J
#
#   bench/isolation/run.sh <build dir> <out dir> [options]
#     --pairs "…"     HP request kind : BE shape[@block µs] (default "small:long small:short small:mem");
#                     kinds: small (8 kernels, ~200 µs) large (48 kernels, ~3.7 ms); shapes: mixed
#                     (the original iteration) long short mem, see bench/isolation/be_workload.cuh
#     --builds "…"    BE builds, of: sass ptx (default "sass")
#     --seconds S     length of each run (default 5)
#     --repeats R     repetitions of the whole matrix (default 3)
#     --rho X         HP load as a fraction of its solo service rate (default 0.5)
#     --be-lead S     BE runs this long before HP starts (default 1; 0: both start together)
#     --sweep "a b"   also run native and tally-priority at these loads (first pair and build, one repeat)
#     --systems "…"   subset of: native mps mps-prio green-split-<N> tally-passthrough tally-priority
#                     tally-no-gate tally-no-transforms tally-no-stream-priorities tally-partition
#                     tally-partition-64 tally-partition-overlap tally-partition-gate
#                     tally-partition-24-overlap tally-partition-overlap-dyn tally-partition-control
#                     tally-default tally-budget-<F>x
#                     tally-default-no-launch-thread tally-default-be-inline-0 tally-reserve-<N>[-overlap]
#                     tally-no-chain tally-chain-always
#                     (green-split-<N>: one native process, HP on a green context of N SMs, BE on the rest;
#                     green-split-0: one native process, one context, HP's stream at top priority;
#                     green-split-<N>-overlap: tallyd's overlapped reserve natively, HP on a green
#                     context of every SM at top priority, BE on one of the rest at the lowest;
#                     tally-budget-<F>x: the reserves $BUDGET_LEVELS chosen online for HP's p99 within F x
#                     HP alone, which tallyd learned in the tally-hp-alone run: the cache dir is shared;
#                     tally-reserve-<N>[-overlap][-nochain]: --sm-partition N[:overlap], any reserve size
#                     (-nochain: with --hp-chain off);
#                     <system>+pdl: HP chains its own kernels, programmatic dependent launch)
#
# ISOLATION_TALLYD=<path>: the tallyd binary to run (default: the build dir's).
# ISOLATION_SERVICE_LOGS=1: every HP run also writes each request's times to
# <out>/service/<pair>-<system>-<build>-r<repeat>.tsv (hp_infer --service-log).
# Baselines, per repeat: hp-alone (native) and tally-hp-alone per request kind, be-alone (native)
# per BE shape and build. The BE-alone run of the first repeat calibrates the block loop count;
# every later run of that BE gets the same count (--block-iterations), so all systems do the same
# work per BE iteration. Needs root for MPS (private pipe directory; the daemon is stopped on
# exit). Never changes clocks, compute mode or MIG.
# shellcheck disable=SC2046  # option and environment lists are split into words on purpose
set -euo pipefail

[[ $# -ge 2 ]] || { sed -n 2,29p "$0"; exit 2; }
BUILD=$(cd "$1" && pwd)
OUT=$2
shift 2
SECONDS_PER_RUN=5
REPEATS=3
RHO=0.5
BE_LEAD=1
SWEEP=""
PAIRS="small:long small:short small:mem"
BUILDS="sass"
BUDGET_LEVELS=${BUDGET_LEVELS:-24:overlap,40:overlap,40,64}  # the reserves tally-budget-<F>x chooses from
SYSTEMS="native mps mps-prio green-split-40 green-split-64 tally-passthrough tally-priority tally-no-gate
  tally-no-transforms tally-no-stream-priorities tally-partition tally-partition-64 tally-partition-overlap
  tally-partition-gate"
while [[ $# -gt 0 ]]; do
  case $1 in
    --pairs) PAIRS=$2; shift 2 ;;
    --builds) BUILDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --rho) RHO=$2; shift 2 ;;
    --be-lead) BE_LEAD=$2; shift 2 ;;
    --sweep) SWEEP=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

log() { echo "[isolation] $*" >&2; }
die() { log "$*"; exit 2; }

# --- Pairs: "kind:shape[@us]" -> request kind and BE key "shape@us" (us empty for mixed) ---
default_block_us() {
  case $1 in long) echo 7500 ;; short) echo 150 ;; mem) echo 1000 ;; mixed) echo "" ;; esac
}
pair_kind() { echo "${1%%:*}"; }
pair_be() {  # the BE key of a pair, its block length made explicit
  local be=${1#*:} shape us
  shape=${be%%@*}
  us=$(default_block_us "$shape")
  [[ $be == *@* ]] && us=${be#*@}
  echo "$shape@$us"
}
for p in $PAIRS; do
  [[ $p == *:* ]] || die "pair $p: expected KIND:SHAPE[@US]"
  [[ $(pair_kind "$p") =~ ^(small|large)$ ]] || die "pair $p: request kind must be small or large"
  be=$(pair_be "$p")
  [[ ${be%@*} =~ ^(mixed|long|short|mem)$ ]] || die "pair $p: shape must be mixed, long, short or mem"
  if [[ ${be%@*} == mixed ]]; then
    [[ $be == mixed@ ]] || die "pair $p: mixed has no block length"
  else
    [[ ${be#*@} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "pair $p: block length must be a number of µs"
  fi
done
for b in $BUILDS; do [[ $b =~ ^(ptx|sass)$ ]] || die "build $b: expected ptx or sass"; done
known_system() {
  case $1 in
    native|mps|mps-prio|tally-passthrough|tally-priority|tally-no-gate|tally-no-transforms) ;;
    tally-no-stream-priorities|tally-partition|tally-partition-64|tally-partition-overlap|tally-partition-gate) ;;
    tally-partition-24-overlap|tally-partition-overlap-dyn|tally-partition-control|tally-default) ;;
    tally-default-no-launch-thread|tally-default-be-inline-0|tally-no-chain|tally-chain-always) ;;
    *) [[ $1 =~ ^green-split-[0-9]+(-overlap)?$ || $1 =~ ^tally-budget-[0-9.]+x$ || $1 =~ ^tally-reserve-[0-9]+(-overlap)?(-nochain)?$ ]] ;;
  esac
}
# <system>+pdl: the same system with HP chaining its own kernels (--pdl 1).
for s in $SYSTEMS; do
  known_system "${s%+pdl}" || die "unknown system $s"
done
KINDS=$(for p in $PAIRS; do pair_kind "$p"; done | sort -u | xargs)
BES=$(for p in $PAIRS; do pair_be "$p"; done | sort -u | xargs)
read -r FIRST_PAIR _ <<<"$PAIRS"
read -r FIRST_BUILD _ <<<"$BUILDS"

# --- Time estimate: each process run pays ~STARTUP s (CUDA init, tallyd start, warm-up) ---
STARTUP=1.5
count() { wc -w <<<"$1"; }
ESTIMATE=$(python3 - "$SECONDS_PER_RUN" "$BE_LEAD" "$REPEATS" "$(count "$KINDS")" "$(count "$BES")" \
  "$(count "$PAIRS")" "$(count "$BUILDS")" "$(count "$SYSTEMS")" "$(count "$SWEEP")" "$STARTUP" <<'EOF'
import sys
s, lead, reps, kinds, bes, pairs, builds, systems, sweep, up = map(float, sys.argv[1:])
run, pair = s + up, s + lead + up
once = kinds * (3 + up) + bes * builds * 2 * (2 + up)        # solo service times, tallyd warm-up
per_repeat = kinds * 2 * run + bes * builds * run            # hp-alone, tally-hp-alone, be-alone
per_repeat += pairs * builds * (systems * pair + 2)          # co-located runs, MPS start/stop
print(round(once + reps * per_repeat + sweep * (run + 2 * pair)))
EOF
)
log "pairs: $PAIRS; builds: $BUILDS; $(count "$SYSTEMS") systems; $REPEATS repeat(s) of ${SECONDS_PER_RUN} s"
log "estimated GPU time: ~$((ESTIMATE / 60)) min $((ESTIMATE % 60)) s"

BIN=$BUILD/bench/isolation
TALLYD=${ISOLATION_TALLYD:-$BUILD/server/tallyd}  # another tallyd binary: an A/B of two builds
CLIENT=$BUILD/client/libtally_client.so
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUNS=$OUT/runs.jsonl
: >"$RUNS"
WORK=$(mktemp -d /tmp/tally-isolation.XXXXXX)
CACHE=$WORK/cache
printf 'inline_wait_us = 0\n' >"$WORK/be-inline-0.toml"
SOCK=$WORK/tallyd.sock
TALLYD_PID=""
MPS_ON=0
declare -A RATE BLOCK_ITERATIONS

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
  if [[ -n ${CLOCK_PID:-} ]]; then kill "$CLOCK_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

start_tallyd() {  # extra tallyd flags...; fails (without exiting) when tallyd does not come up
  stop_tallyd
  rm -f "$SOCK"
  "$TALLYD" --listen "unix:$SOCK" --admin "" --cache-dir "$CACHE" "$@" >>"$OUT/tallyd.log" 2>&1 &
  TALLYD_PID=$!
  for _ in $(seq 1 100); do
    [[ -S $SOCK ]] && return 0
    kill -0 "$TALLYD_PID" 2>/dev/null || break  # exited, e.g. on a flag it does not know
    sleep 0.05
  done
  log "tallyd $* did not start"; tail -5 "$OUT/tallyd.log" >&2
  stop_tallyd
  return 1
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
    mps) echo "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps" ;;
    mps-prio)
      if [[ $role == be ]]; then echo "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_CLIENT_PRIORITY=1"
      else echo "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_CLIENT_PRIORITY=0"; fi ;;
    tally-*)
      local prio=best-effort
      [[ $role == hp ]] && prio=high
      echo "LD_PRELOAD=$CLIENT TALLY_SERVER=unix:$SOCK TALLY_TENANT=$role TALLY_PRIORITY=$prio" ;;
    *) echo "" ;;  # native, green-split-*
  esac
}

tally_flags() {
  case $1 in
    tally-passthrough) echo "--policy passthrough" ;;
    tally-default) echo "--policy priority" ;;  # the shipped configuration's scheduler keys
    tally-no-chain) echo "--policy priority --hp-chain off" ;;  # the defaults without chained HP kernels
    tally-chain-always) echo "--policy priority --hp-chain always" ;;
    tally-default-no-launch-thread) echo "--policy priority --no-hp-launch-thread" ;;
    # A best-effort tenant's sync goes straight to the completion thread (no inline polling).
    tally-default-be-inline-0) echo "--policy priority --config $WORK/be-inline-0.toml" ;;
    tally-priority) echo "--policy priority --gate --transforms" ;;  # every layer: the ablations take one away
    tally-no-gate) echo "--policy priority --no-gate --transforms" ;;
    tally-no-transforms) echo "--policy priority --gate --no-transforms" ;;
    tally-no-stream-priorities) echo "--policy priority --gate --transforms --no-stream-priorities" ;;
    tally-partition) echo "--policy priority --sm-partition 40" ;;
    tally-partition-64) echo "--policy priority --sm-partition 64" ;;
    tally-partition-overlap) echo "--policy priority --sm-partition 40:overlap" ;;
    tally-partition-gate) echo "--policy priority --sm-partition 40 --partition-gate --gate --transforms" ;;
    tally-partition-24-overlap) echo "--policy priority --sm-partition 24:overlap" ;;
    # Split only while HP has had work within 0.3 ms: BE gets every SM between requests.
    tally-partition-overlap-dyn) echo "--policy priority --sm-partition 40:overlap --partition-idle-ms 0.3" ;;
    # Split only while that serves HP better than sharing every SM (learned from HP's waits).
    tally-partition-control) echo "--policy priority --sm-partition 40:overlap --partition-control" ;;
    tally-budget-*) echo "--policy priority --sm-partition $BUDGET_LEVELS --hp-p99-budget ${1#tally-budget-}" ;;
    # Any reserve size: tally-reserve-32 (plain), tally-reserve-32-overlap (HP's context spans every SM).
    tally-reserve-*-nochain) echo "$(tally_flags "${1%-nochain}") --hp-chain off" ;;
    tally-reserve-*-overlap) local n=${1#tally-reserve-}; echo "--policy priority --sm-partition ${n%-overlap}:overlap" ;;
    tally-reserve-*) echo "--policy priority --sm-partition ${1#tally-reserve-}" ;;
  esac
}

prepare() {  # system; fails when its tallyd does not start
  case $1 in
    mps|mps-prio) stop_tallyd; [[ $MPS_ON == 1 ]] || start_mps ;;
    tally-*) stop_mps; start_tallyd $(tally_flags "$1") ;;
    *) stop_tallyd; stop_mps ;;
  esac
}

json_field() {  # json key... : the value (objects as JSON), empty when absent or not JSON
  python3 -c 'import json, sys
try:
    v = json.loads(sys.argv[1])
    for k in sys.argv[2:]:
        v = v[k]
    print(json.dumps(v) if isinstance(v, (dict, list)) else v)
except (ValueError, KeyError, TypeError):
    pass' "$@"
}

# The BE program's options for a BE key ("shape@us") and build: the calibrated loop count once
# the BE-alone run has measured it.
be_args() {  # key build
  local shape=${1%@*} us=${1#*@}
  echo -n "--shape $shape"
  [[ -n $us ]] && echo -n " --block-us $us"
  [[ -n ${BLOCK_ITERATIONS[$1:$2]:-} ]] && echo -n " --block-iterations ${BLOCK_ITERATIONS[$1:$2]}"
  echo
}

# hp_infer / green_split options for a per-request log of one run, when asked for.
service_log() {  # name
  [[ ${ISOLATION_SERVICE_LOGS:-0} == 1 ]] || return 0
  mkdir -p "$OUT/service"
  echo "--service-log $OUT/service/${1//:/-}.tsv"
}

# One runs.jsonl line. Baselines leave out what they do not have: hp-alone has no BE, be-alone
# no HP request kind.
record() {  # repeat pair kind be_key build system rho hp_json be_json
  local pair=null kind=null shape=null us=null
  [[ -n $2 ]] && pair="\"$2\""
  [[ -n $3 ]] && kind="\"$3\""
  if [[ -n $4 ]]; then
    shape="\"${4%@*}\""
    [[ -n ${4#*@} ]] && us=${4#*@}
  fi
  echo "{\"repeat\":$1,\"pair\":$pair,\"hp_request\":$kind,\"be_shape\":$shape,\"be_block_us\":$us,\"be_build\":\"$5\",\"system\":\"$6\",\"rho\":$7,\"hp\":${8:-null},\"be\":${9:-null}}" >>"$RUNS"
}

hp_alone() {  # repeat kind rho rate baseline(hp-alone|tally-hp-alone)
  local hp="" system=native
  # Through tallyd with the budget's reserves: HP alone never splits them, and tallyd learns
  # (and keeps in the cache dir) HP's p99 alone, which tally-budget-<F>x is relative to.
  [[ $5 == tally-hp-alone ]] && system=tally-budget-1x
  if prepare "$system"; then
    hp=$(env $(client_env "$system" hp) "$BIN/hp_infer" --request "$2" --rate "$4" \
      --seconds "$SECONDS_PER_RUN" --seed "$1" $(service_log "$5-$2-r$1") 2>>"$OUT/clients.log") ||
      log "$5 $2 failed"
  fi
  record "$1" "" "$2" "" none "$5" "$3" "$hp" ""
}

be_alone() {  # repeat key build rho; the first run calibrates the loop count
  local be
  prepare native
  be=$("$BIN/be_train_$3" $(be_args "$2" "$3") --seconds "$SECONDS_PER_RUN" 2>>"$OUT/clients.log") ||
    log "be-alone $2/$3 failed"
  record "$1" "" "" "$2" "$3" be-alone "$4" "" "$be"
  if [[ -z ${BLOCK_ITERATIONS[$2:$3]:-} ]]; then
    BLOCK_ITERATIONS[$2:$3]=$(json_field "$be" block_iterations)
    log "BE $2/$3 alone: $be"
  fi
}

# Warm tallyd's caches (compiled variants, learned durations) with the BE under the priority
# policy, so that measured runs start as a long-running tallyd would be.
warm_tallyd() {  # key build
  start_tallyd --policy priority --gate --transforms || return 0
  for _ in 1 2; do
    env $(client_env tally-priority be) "$BIN/be_train_$2" $(be_args "$1" "$2") --seconds 2 \
      >/dev/null 2>>"$OUT/clients.log" || true
  done
  stop_tallyd
}

# One co-located run, in steady state: training is already running when inference starts. BE
# starts first and counts iterations only after BE_LEAD seconds (past its warm-up), HP starts
# BE_LEAD seconds after it; both then measure for SECONDS_PER_RUN (windows aligned to ~0.1 s).
colocated() {  # repeat pair build system rho rate
  local repeat=$1 pair=$2 build=$3 system=$4 rho=$5 rate=$6
  local kind be_key be_out=$WORK/be.json hp_out=$WORK/hp.json base=${4%+pdl} hp_chained=""
  [[ $system == *+pdl ]] && hp_chained="--pdl 1"
  kind=$(pair_kind "$pair")
  be_key=$(pair_be "$pair")
  : >"$be_out"
  : >"$hp_out"
  if [[ $system == green-split-* ]]; then
    local both split=${base#green-split-} overlap=0
    [[ $split == *-overlap ]] && overlap=1
    both=$("$BIN/green_split" --hp-sms "${split%-overlap}" --hp-overlap $overlap $hp_chained --request "$kind" \
      $(be_args "$be_key" "$build") \
      --rate "$rate" --seconds "$SECONDS_PER_RUN" --lead "$BE_LEAD" --seed "$repeat" \
      $(service_log "$pair-$system-$build-r$repeat") 2>>"$OUT/clients.log") ||
      log "green_split failed under $system"
    json_field "$both" hp >"$hp_out"
    json_field "$both" be >"$be_out"
  else
    env $(client_env "$base" be) "$BIN/be_train_$build" $(be_args "$be_key" "$build") \
      --seconds "$SECONDS_PER_RUN" --lead "$BE_LEAD" >"$be_out" 2>>"$OUT/clients.log" &
    local be_pid=$!
    sleep "$BE_LEAD"
    env $(client_env "$base" hp) "$BIN/hp_infer" --request "$kind" --rate "$rate" --seconds "$SECONDS_PER_RUN" \
      --seed "$repeat" $hp_chained $(service_log "$pair-$system-$build-r$repeat") >"$hp_out" 2>>"$OUT/clients.log" ||
      log "hp failed under $system"
    wait "$be_pid" || log "be failed under $system"
  fi
  record "$repeat" "$pair" "$kind" "$be_key" "$build" "$system" "$rho" "$(cat "$hp_out")" "$(cat "$be_out")"
  log "$pair $system/$build rho=$rho: hp $(cat "$hp_out") be $(cat "$be_out")"
}

run_systems() {  # repeat pair build rho rate systems...
  local repeat=$1 pair=$2 build=$3 rho=$4 rate=$5 system
  shift 5
  for system in "$@"; do
    if prepare "${system%+pdl}"; then
      colocated "$repeat" "$pair" "$build" "$system" "$rho" "$rate"
    else
      record "$repeat" "$pair" "$(pair_kind "$pair")" "$(pair_be "$pair")" "$build" "$system" "$rho" "" ""
    fi
  done
}

nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv -lms 1000 \
  >"$OUT/clocks.csv" 2>/dev/null &
CLOCK_PID=$!
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1 || true

rate_for() { python3 -c "print($1 / ($2 / 1e6))"; }  # rho mean_service_us
declare -A MEAN
for kind in $KINDS; do
  log "HP $kind: solo service time (closed loop, 3 s)"
  solo=$("$BIN/hp_infer" --request "$kind" --solo 3) || { log "HP $kind: hp_infer failed"; exit 1; }
  echo "$solo" >"$OUT/hp_solo_$kind.json"
  MEAN[$kind]=$(json_field "$solo" service_us mean)
  [[ -n ${MEAN[$kind]} ]] || { log "HP $kind: no solo service time"; exit 1; }
  RATE[$kind]=$(rate_for "$RHO" "${MEAN[$kind]}")
  log "HP $kind: solo mean service ${MEAN[$kind]} µs -> ${RATE[$kind]} req/s at rho $RHO"
done

for repeat in $(seq 1 "$REPEATS"); do
  for kind in $KINDS; do
    hp_alone "$repeat" "$kind" "$RHO" "${RATE[$kind]}" hp-alone
    # HP alone through tallyd: what remoting costs it, apart from any co-location.
    hp_alone "$repeat" "$kind" "$RHO" "${RATE[$kind]}" tally-hp-alone
  done
  for build in $BUILDS; do
    for be_key in $BES; do
      calibrated=${BLOCK_ITERATIONS[$be_key:$build]:-}
      be_alone "$repeat" "$be_key" "$build" "$RHO"
      [[ -n $calibrated ]] || warm_tallyd "$be_key" "$build"  # first time: warm tallyd with this BE
    done
    for pair in $PAIRS; do
      # shellcheck disable=SC2086  # one argument per system
      run_systems "$repeat" "$pair" "$build" "$RHO" "${RATE[$(pair_kind "$pair")]}" $SYSTEMS
    done
  done
done

# The load sweep reuses repeat 1's be-alone (report.py knows).
for rho in $SWEEP; do
  kind=$(pair_kind "$FIRST_PAIR")
  rate=$(rate_for "$rho" "${MEAN[$kind]}")
  hp_alone 1 "$kind" "$rho" "$rate" hp-alone
  run_systems 1 "$FIRST_PAIR" "$FIRST_BUILD" "$rho" "$rate" native tally-priority
done
stop_tallyd
stop_mps
log "done: $RUNS"
