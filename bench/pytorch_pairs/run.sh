#!/usr/bin/env bash
# PyTorch isolation pairs, in the manner of the Tally paper: an inference job as the
# high-priority tenant (HP, open-loop Poisson requests at batch 1) next to a training job as the
# best-effort tenant (BE), under several systems. Workloads: bench/pytorch_pairs/workload.py.
#
#   bench/pytorch_pairs/run.sh <build dir> <out dir> [options]
#     --pairs "…"       HP model:BE model (default "bert:resnet50 resnet50:gpt2");
#                       HP: bert resnet50; BE: resnet50 gpt2 ticker (a tiny kernel every 2 ms:
#                       keeps SM partitions split with next to no BE work, to tell HP's cost of
#                       fewer SMs from BE's interference)
#     --systems "…"     of: native mps mps-prio tally-passthrough tally-default tally-priority
#                       tally-partition tally-partition-64 tally-partition-overlap tally-budget-<F>x (default "native
#                       mps-prio tally-priority tally-partition-overlap"); tally-budget-<F>x: the SM
#                       reserves $BUDGET_LEVELS chosen online for HP's p99 within F x HP alone, learned
#                       by tallyd in the tally-hp-alone run (the cache dir is kept for the whole run);
#                       any tally system with -q<N> appended: the same with N hardware queues
#     --seconds S       measured window of every run (default 10)
#     --lead L          BE trains uncounted this long before the HP schedule starts (default 10)
#     --rho X           HP load: rate = X / mean solo service time (default 0.5)
#     --solo S          closed-loop run that measures the solo service time (default 2)
#     --startup-max S   longest expected client start-up (import, model, warm-up); sets the
#                       client time limits (default 60)
#     --cudnn-benchmark BE trains with torch.backends.cudnn.benchmark = True
#
# Per pair: hp-solo (native, closed loop: the rate), hp-alone (native), be-alone (native), and,
# when a tally system is asked for, tally-be-alone and tally-hp-alone (tallyd --policy priority;
# tally-be-alone also fills tallyd's cache directory, kept for the whole run, before the
# co-located runs). Then per system: BE and HP start together; BE trains --lead seconds, then
# HP (warmed up meanwhile) starts its seeded schedule (same seed everywhere) for --seconds and
# BE counts iterations over the same window (workload.py --warm-file/--go-file).
# Systems: native = two plain processes (time-sliced); mps/mps-prio = an MPS daemon on a private
# pipe directory, mps-prio with CUDA_MPS_CLIENT_PRIORITY=1 for BE; tally-* = a fresh private
# tallyd per run (--listen unix:…, --admin "", --library-dir <cuDNN of the torch wheel>):
# tally-passthrough --policy passthrough; tally-default --policy priority (the shipped
# scheduler keys: stream priorities, no gate, no transforms); tally-priority + --gate
# --transforms; tally-partition
# + --sm-partition 40; tally-partition-overlap + --sm-partition 40:overlap. Clients of tallyd
# run with TALLY_PRIORITY=high (HP) / best-effort (BE) and, as root, with the GPU and libcuda
# hidden (tests/gpu/hide_gpu.sh in a mount namespace).
#
# Every client runs under timeout(1); a failed client gives null and the run goes on.
# <out dir>: runs.jsonl (one line per run: pair, system, hp, be, …), clients.log (commands and
# stderr of every client), tallyd.log, mps.log, gpu.txt. Then:
#   python3 bench/pytorch_pairs/report.py <out dir>/runs.jsonl --markdown M --json J
# Environment: PAIRS_PYTHON [python3], PAIRS_NO_HIDE=1 (debugging: tallyd's clients see the GPU).
# Exit: 0 done (failed runs are null lines), 2 usage, 77 no GPU or no CUDA torch.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../../scripts/tally_lib.sh
source "$SRC/scripts/tally_lib.sh"

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }
log() { echo "[pytorch_pairs] $*" >&2; }
die() { log "$*"; exit 2; }

[[ $# -ge 2 ]] || usage
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "build dir '$1' not found"
OUT=$2
shift 2
PAIRS="bert:resnet50 resnet50:gpt2"
SYSTEMS="native mps-prio tally-priority tally-partition-overlap"
BUDGET_LEVELS=${BUDGET_LEVELS:-24:overlap,40:overlap,40,64}
SECS=10
LEAD=10
RHO=0.5
SOLO=2
STARTUP_MAX=60
CUDNN_ARG=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --pairs) PAIRS=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --lead) LEAD=$2; shift 2 ;;
    --rho) RHO=$2; shift 2 ;;
    --solo) SOLO=$2; shift 2 ;;
    --startup-max) STARTUP_MAX=$2; shift 2 ;;
    --cudnn-benchmark) CUDNN_ARG=(--cudnn-benchmark); shift ;;
    -h|--help) usage ;;
    *) die "unknown option $1" ;;
  esac
done

number() { [[ $2 =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "$1 must be a number, got '$2'"; }
number --seconds "$SECS"; number --lead "$LEAD"; number --rho "$RHO"; number --solo "$SOLO"
number --startup-max "$STARTUP_MAX"
for p in $PAIRS; do
  [[ $p =~ ^(bert|resnet50):(resnet50|gpt2|ticker)$ ]] || die "pair $p: expected HP:BE with HP bert|resnet50, BE resnet50|gpt2|ticker"
done
TALLY=0
for s in $SYSTEMS; do
  case $s in
    native|mps|mps-prio) ;;
    tally-passthrough|tally-default|tally-priority|tally-partition|tally-partition-64|tally-partition-overlap) TALLY=1 ;;
    *) [[ $s =~ ^tally-budget-[0-9.]+x$ || $s =~ ^tally-.+-q[0-9]+$ ]] || die "unknown system $s"; TALLY=1 ;;
  esac
done
[[ -n $PAIRS && -n $SYSTEMS ]] || die "no pairs or no systems"

PY=${PAIRS_PYTHON:-python3}
TALLYD=$BUILD/server/tallyd
CLIENT=$BUILD/client/libtally_client.so
if [[ $TALLY -eq 1 ]]; then
  [[ -x $TALLYD && -f $CLIENT ]] || die "$TALLYD or $CLIENT not built"
fi
reason=$(tl_gpu_skip_reason)
[[ -z $reason ]] || { log "SKIP: no GPU visible ($reason)"; exit 77; }
reason=$(tl_torch_skip_reason "$PY")
[[ -z $reason ]] || { log "SKIP: $reason"; exit 77; }

# --- Time: a client start-up (import torch/transformers, build, warm-up, exit) ~8 s, a tallyd
# start ~1.5 s, MPS start + stop ~2 s.
ESTIMATE=$(awk -v s="$SECS" -v l="$LEAD" -v solo="$SOLO" -v pairs="$(wc -w <<<"$PAIRS")" \
  -v tally="$TALLY" -v systems="$(wc -w <<<"$SYSTEMS")" -v ntally="$(tr ' ' '\n' <<<"$SYSTEMS" | grep -c '^tally-')" \
  -v mps="$(tr ' ' '\n' <<<"$SYSTEMS" | grep -c '^mps')" 'BEGIN {
    up = 8; td = 1.5
    base = (up + solo) + (up + s) + (up + l + s)            # hp-solo, hp-alone, be-alone
    if (tally) base += (td + up + l + s) + (td + up + s)   # tally-be-alone, tally-hp-alone
    per = base + systems * (up + l + s + 1) + ntally * td + (mps > 0 ? 2 : 0)
    printf "%d", pairs * per + 0.5 }')
LIMIT=$(awk -v a="$STARTUP_MAX" -v l="$LEAD" -v s="$SECS" 'BEGIN { printf "%d", a + l + s + 30 + 0.5 }')
SOLO_LIMIT=$(awk -v a="$STARTUP_MAX" -v s="$SOLO" 'BEGIN { printf "%d", a + s + 30 + 0.5 }')
WAIT=$(awk -v a="$STARTUP_MAX" -v l="$LEAD" 'BEGIN { printf "%d", a + l + 0.5 }')
log "pairs: $PAIRS; systems: $SYSTEMS; window ${SECS} s, BE lead ${LEAD} s, rho $RHO"
log "estimated GPU time: ~$((ESTIMATE / 60)) min $((ESTIMATE % 60)) s (a hung client is stopped after ${LIMIT} s)"

mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
RUNS=$OUT/runs.jsonl
: >"$RUNS"
: >"$OUT/clients.log"
: >"$OUT/tallyd.log"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tally-pytorch-pairs.XXXXXX")
SOCK=$WORK/tallyd.sock
MPS_ON=0
HP_PID=""
BE_PID=""
TALLYD_ARGS=""

stop_mps() {
  if [[ $MPS_ON == 1 ]]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$WORK/mps nvidia-cuda-mps-control >/dev/null 2>&1
    sleep 1
    MPS_ON=0
    cat "$WORK"/mpslog/*.log >>"$OUT/mps.log" 2>/dev/null
    rm -f "$WORK"/mpslog/*.log
  fi
}
start_mps() {
  mkdir -p "$WORK/mps" "$WORK/mpslog"
  if CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_LOG_DIRECTORY=$WORK/mpslog nvidia-cuda-mps-control -d; then
    MPS_ON=1
    sleep 1
    return 0
  fi
  log "the MPS control daemon did not start"
  return 1
}
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  local pid
  for pid in $HP_PID $BE_PID; do kill -TERM "$pid" 2>/dev/null; done
  for pid in $HP_PID $BE_PID; do wait "$pid" 2>/dev/null; done
  tl_stop_tallyd
  stop_mps
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
log "GPU: $(sed -n 2p "$OUT/gpu.txt")"
LIBDIR_ARGS=()
if [[ $TALLY -eq 1 ]]; then
  tl_libcuda_dir "$CLIENT" "$WORK/libcuda"
  tl_setup_hide "$WORK" "${PAIRS_NO_HIDE:-}"
  [[ -n $TL_HIDE_NOTE ]] && log "$TL_HIDE_NOTE"
  read -r -a LIBDIR_ARGS <<<"$(tl_library_dir_args "$PY")"
  [[ ${#LIBDIR_ARGS[@]} -gt 0 ]] || log "WARNING: no libcudnn.so.9 in $PY's site-packages: tallyd gets no --library-dir"
fi

tally_flags() {  # a name ending in -q<N> is that system with N hardware queues (--hardware-queues)
  if [[ $1 =~ ^(tally-.+)-q([0-9]+)$ ]]; then
    echo "$(tally_flags "${BASH_REMATCH[1]}") --hardware-queues ${BASH_REMATCH[2]}"
    return
  fi
  case $1 in
    tally-passthrough) echo "--policy passthrough" ;;
    tally-default) echo "--policy priority" ;;
    tally-priority) echo "--policy priority --gate --transforms" ;;
    tally-partition) echo "--policy priority --sm-partition 40" ;;
    tally-partition-64) echo "--policy priority --sm-partition 64" ;;
    tally-partition-overlap) echo "--policy priority --sm-partition 40:overlap" ;;
    tally-budget-*) echo "--policy priority --sm-partition $BUDGET_LEVELS --hp-p99-budget ${1#tally-budget-}" ;;
  esac
}

prepare() {  # system; fails when its tallyd or MPS does not start
  TALLYD_ARGS=""
  case $1 in
    mps|mps-prio) tl_stop_tallyd; [[ $MPS_ON == 1 ]] || start_mps ;;
    tally-*)
      stop_mps
      tl_stop_tallyd
      local -a flags
      read -r -a flags <<<"$(tally_flags "$1")"
      TALLYD_ARGS="--admin '' --cache-dir $WORK/cache ${LIBDIR_ARGS[*]} ${flags[*]}"
      tl_start_tallyd "$TALLYD" "$SOCK" "$OUT/tallyd.log" --admin "" --cache-dir "$WORK/cache" \
        "${LIBDIR_ARGS[@]}" "${flags[@]}" ;;
    *) tl_stop_tallyd; stop_mps ;;
  esac
}

# CMD: the command line (without workload.py's arguments) of a client under a system.
client_cmd() {  # system role limit
  local system=$1 role=$2 prio=best-effort
  [[ $role == hp ]] && prio=high
  local -a common=(TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
                   TRANSFORMERS_VERBOSITY=error "OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}")
  CMD=(timeout -k 5 "$3")
  case $system in
    tally-*)
      tl_client_env "$CLIENT" "unix:$SOCK" "$role" "$prio" "$WORK/libcuda"
      [[ $TL_HIDE -eq 1 ]] && CMD+=(unshare -m bash "$SRC/tests/gpu/hide_gpu.sh" "$TL_OLDDEV")
      CMD+=(env "${common[@]}" "${TL_CLIENT_ENV[@]}") ;;
    mps|mps-prio)
      CMD+=(env -u LD_PRELOAD -u TALLY_SERVER "${common[@]}" "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps")
      if [[ $system == mps-prio ]]; then
        if [[ $role == be ]]; then CMD+=(CUDA_MPS_CLIENT_PRIORITY=1); else CMD+=(CUDA_MPS_CLIENT_PRIORITY=0); fi
      fi ;;
    *) CMD+=(env -u LD_PRELOAD -u TALLY_SERVER "${common[@]}") ;;
  esac
  CMD+=("$PY" "$HERE/workload.py")
}

log_client() {  # title rc stderr-file command...
  local title=$1 rc=$2 err=$3
  shift 3
  {
    echo "=== $(date -u +%H:%M:%S) $title: exit $rc"
    echo "\$ $(printf '%q ' "$@")"
    cat "$err" 2>/dev/null
  } >>"$OUT/clients.log"
}

# One runs.jsonl line; hp and be: the last JSON line of that role in the file (else null).
record() {  # pair system hp_file be_file hp_rc be_rc
  "$PY" - "$RUNS" "$1" "$2" "${3:-}" "${4:-}" "${5:-}" "${6:-}" "$RHO" "${RATE:-}" "$SECS" "$LEAD" \
    "$TALLYD_ARGS" "${TL_HIDE:-0}" <<'PY'
import json, sys, time
runs, pair, system, hp_file, be_file, hp_rc, be_rc, rho, rate, secs, lead, targs, hidden = sys.argv[1:]
def last(path, role):
    try:
        lines = open(path).read().splitlines() if path else []
    except OSError:
        return None
    for line in reversed(lines):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("role") == role:
            return d
    return None
hp, be = last(hp_file, "hp"), last(be_file, "be")
rec = {"pair": pair, "hp_model": pair.split(":")[0], "be_model": pair.split(":")[1], "system": system,
       "rho": float(rho), "rate": float(rate) if rate else None, "seconds": float(secs), "lead": float(lead),
       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "hp_rc": int(hp_rc) if hp_rc else None, "be_rc": int(be_rc) if be_rc else None,
       "tallyd_args": targs or None, "hidden": system.startswith("tally-") and hidden == "1",
       "hp": hp, "be": be}
with open(runs, "a") as f:
    f.write(json.dumps(rec) + "\n")
h = f"hp p50/p99 response {hp['response_us']['p50']:.0f}/{hp['response_us']['p99']:.0f} µs ({hp['requests']} requests)" \
    if hp and hp.get("response_us") else ("hp solo mean %.0f µs" % hp["service_us"]["mean"] if hp else "hp -")
b = f"be {be['iterations_per_s']:.2f} it/s" if be else "be -"
print(f"[pytorch_pairs] {pair} {system}: {h}, {b}", file=sys.stderr)
PY
}

# A baseline: one client in the foreground.
alone() {  # pair system(record name) run-system role limit workload-args...
  local pair=$1 name=$2 system=$3 role=$4 limit=$5 rc=0
  shift 5
  local out=$WORK/$role.json
  : >"$out"
  if prepare "$system"; then
    client_cmd "$system" "$role" "$limit"
    "${CMD[@]}" "$@" >"$out" 2>"$WORK/$role.err" || rc=$?
    log_client "$pair $name $role" "$rc" "$WORK/$role.err" "${CMD[@]}" "$@"
  else
    rc=""
  fi
  if [[ $role == hp ]]; then record "$pair" "$name" "$out" "" "$rc" ""; else record "$pair" "$name" "" "$out" "" "$rc"; fi
}

colocated() {  # pair system
  local pair=$1 system=$2 hpm=${1%%:*} bem=${1#*:}
  local hp_out=$WORK/hp.json be_out=$WORK/be.json warm=$WORK/warm go=$WORK/go hp_rc=0 be_rc=0
  rm -f "$warm" "$go"
  : >"$hp_out"
  : >"$be_out"
  if ! prepare "$system"; then
    record "$pair" "$system" "" "" "" ""
    return
  fi
  client_cmd "$system" be "$LIMIT"
  local -a be_cmd=("${CMD[@]}" --role be --model "$bem" --seconds "$SECS" --lead "$LEAD" --warm-file "$warm"
                   --go-file "$go" --wait-timeout "$WAIT" "${CUDNN_ARG[@]}")
  client_cmd "$system" hp "$LIMIT"
  local -a hp_cmd=("${CMD[@]}" --role hp --model "$hpm" --rate "$RATE" --seconds "$SECS" --seed 1
                   --wait-file "$warm" --go-file "$go" --wait-timeout "$WAIT")
  "${be_cmd[@]}" >"$be_out" 2>"$WORK/be.err" &
  BE_PID=$!
  "${hp_cmd[@]}" >"$hp_out" 2>"$WORK/hp.err" &
  HP_PID=$!
  while kill -0 "$HP_PID" 2>/dev/null; do  # BE gone before the schedule began: HP would only wait
    if [[ ! -e $go ]] && ! kill -0 "$BE_PID" 2>/dev/null; then
      log "$pair $system: BE exited before HP started; stopping HP"
      kill -TERM "$HP_PID" 2>/dev/null
      break
    fi
    sleep 0.2
  done
  wait "$HP_PID" || hp_rc=$?
  if [[ $hp_rc -ne 0 ]] && kill -0 "$BE_PID" 2>/dev/null; then
    log "$pair $system: HP failed (exit $hp_rc); stopping BE"
    kill -TERM "$BE_PID" 2>/dev/null
  fi
  wait "$BE_PID" || be_rc=$?
  HP_PID=""
  BE_PID=""
  log_client "$pair $system be" "$be_rc" "$WORK/be.err" "${be_cmd[@]}"
  log_client "$pair $system hp" "$hp_rc" "$WORK/hp.err" "${hp_cmd[@]}"
  record "$pair" "$system" "$hp_out" "$be_out" "$hp_rc" "$be_rc"
}

for pair in $PAIRS; do
  hpm=${pair%%:*}
  bem=${pair#*:}
  RATE=""
  log "$pair: HP $hpm solo service time (closed loop, ${SOLO} s)"
  alone "$pair" hp-solo native hp "$SOLO_LIMIT" --role hp --model "$hpm" --solo "$SOLO"
  mean=$("$PY" -c 'import json, sys
try:
    print(json.loads(sys.stdin.read())["service_us"]["mean"])
except Exception:
    pass' <"$WORK/hp.json" 2>/dev/null)
  if [[ -z $mean ]]; then
    log "$pair: no solo service time (see clients.log); pair skipped"
    continue
  fi
  RATE=$(awk -v r="$RHO" -v m="$mean" 'BEGIN { printf "%.3f", r / (m / 1e6) }')
  log "$pair: HP solo mean service $mean µs -> $RATE requests/s at rho $RHO"
  hp_args=(--role hp --model "$hpm" --rate "$RATE" --seconds "$SECS" --seed 1)
  be_args=(--role be --model "$bem" --seconds "$SECS" --lead "$LEAD" "${CUDNN_ARG[@]}")
  alone "$pair" hp-alone native hp "$LIMIT" "${hp_args[@]}"
  alone "$pair" be-alone native be "$LIMIT" "${be_args[@]}"
  if [[ $TALLY -eq 1 ]]; then
    alone "$pair" tally-be-alone tally-default be "$LIMIT" "${be_args[@]}"
    # With the budget's reserves (never split while HP is alone): tallyd learns HP's p99 alone.
    alone "$pair" tally-hp-alone tally-budget-1x hp "$LIMIT" "${hp_args[@]}"
  fi
  for system in $SYSTEMS; do
    colocated "$pair" "$system"
  done
done
tl_stop_tallyd
stop_mps
log "done: $RUNS ($(wc -l <"$RUNS") runs)"
log "report: python3 $HERE/report.py $RUNS --markdown $OUT/report.md --json $OUT/summary.json"
