#!/usr/bin/env bash
# PyTorch suite driver.
#
#   tests/pytorch/run_suite.sh <build dir>
#
# Runs every case of tests/pytorch/cases natively (the reference), then through a private
# tallyd over a Unix socket (and TCP with PYTORCH_SUITE_TCP=1), each client in a mount
# namespace without the GPU or libcuda (when root; tests/gpu/hide_gpu.sh), and compares the
# JSON results with compare.py: bit for bit, or within the tolerance a step states. Then two
# cases run at once through tallyd, one TALLY_PRIORITY=high and one best-effort.
# One line per run: PASS/FAIL <case> <transport> <seconds> <reason>.
#
# Exit: 0 all passed, 1 something failed, 2 usage/missing build, 77 skipped (no GPU visible,
# or no CUDA-enabled torch for the native reference).
#
# Environment knobs:
#   PYTORCH_SUITE_ONLY="a b"     run only these cases          PYTORCH_SUITE_SKIP="a b"  leave these out
#   PYTORCH_SUITE_TCP=1          also run every case over TCP
#   PYTORCH_SUITE_JOBS=1         cases run at once (each case's own runs stay in order)
#   PYTORCH_SUITE_PAIR="resnet50 bert_base"  the two-tenant run: 1st high priority, 2nd best-effort ("" = none)
#   PYTORCH_SUITE_TIMEOUT=300    limit per run in seconds (a case's "# suite-timeout: N" header wins)
#   PYTORCH_SUITE_PYTHON=python3 interpreter with torch, torchvision, transformers
#   PYTORCH_SUITE_OUT=FILE       also write a JSON summary there
#   PYTORCH_SUITE_TALLYD_ARGS    extra tallyd options, e.g. "--policy priority"
#   PYTORCH_SUITE_PRIORITY=high  the single runs as high-priority tenants (default best-effort; over
#                                TCP tallyd must then allow it, e.g. allow_anonymous_high_priority)
#   PYTORCH_SUITE_NATIVE_TWICE=1 run each case natively twice and require identical results
#   PYTORCH_SUITE_FLOOR_RTOL=0 PYTORCH_SUITE_FLOOR_ATOL=0  diagnosis only: minimum tolerance of every step
#   PYTORCH_SUITE_SMI_CASE=tensor_ops  case whose UDS run is watched with nvidia-smi ("" = none)
#   PYTORCH_SUITE_NO_HIDE=1      debugging only: clients see the GPU
# Per case (header lines of the case file): "# suite-env: VAR=value", "# suite-timeout: N".
# Logs and outputs: <build>/tests/pytorch/suite_results/ (runs/<case>.<transport>.{out,err}).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../../scripts/tally_lib.sh
source "$HERE/../../scripts/tally_lib.sh"

[[ $# -eq 1 ]] || { echo "usage: $0 <build dir>" >&2; exit 2; }
[[ -d $1 ]] || { echo "error: build dir '$1' does not exist" >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
TALLYD=$BUILD/server/tallyd
CLIENT_LIB=$BUILD/client/libtally_client.so
PY=${PYTORCH_SUITE_PYTHON:-python3}
COMPARE=(python3 "$HERE/compare.py")
DEFAULT_TIMEOUT=${PYTORCH_SUITE_TIMEOUT:-300}

# Keep in sync with the files in cases/ (checked below).
ALL_CASES=(tensor_ops matmul conv_bn_pool lstm train_cnn train_transformer resnet50 bert_base
           gpt2_generate llama_bf16 cuda_graph torch_compile multiprocessing_ipc alloc_expandable
           alloc_cuda_malloc_async)
HELPERS=(suite_common alloc_workload)

skip() {
  echo "SKIP: $1"
  if [[ -n ${PYTORCH_SUITE_OUT:-} ]]; then
    python3 -c 'import json, sys; json.dump({"skipped": True, "reason": sys.argv[2], "ok": None}, open(sys.argv[1], "w"))' \
      "$PYTORCH_SUITE_OUT" "$1" 2>/dev/null || true
  fi
  exit 77
}
reason=$(tl_gpu_skip_reason)
[[ -z $reason ]] || skip "no GPU visible ($reason)"
reason=$(tl_torch_skip_reason "$PY")
[[ -z $reason ]] || skip "$reason"

# ---------------------------------------------------------------- bookkeeping
RES=$BUILD/tests/pytorch/suite_results
RUNS=$RES/runs
rm -rf "$RES"
mkdir -p "$RUNS"
LOG=$RES/suite.log
RESULTS=$RES/results.tsv
: >"$LOG"
: >"$RESULTS"
TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-pytorch-suite.XXXXXX")
SOCK=$TMPD/tallyd.sock
LIBCUDA_DIR=$TMPD/libcuda
PASS_N=0
FAIL_N=0

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
indent() { sed 's/^/    | /' | tee -a "$LOG"; }

record() {  # record PASS|FAIL <case> <transport> <seconds> [reason]
  local status=$1 case=$2 transport=$3 secs=$4 why=${5:-}
  if [[ $status == PASS ]]; then PASS_N=$((PASS_N + 1)); else FAIL_N=$((FAIL_N + 1)); fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$status" "$case" "$transport" "$secs" "${why//$'\t'/ }" >>"$RESULTS"
  say "$(printf '%-4s %-24s %-12s %7ss  %s' "$status" "$case" "$transport" "${secs:--}" "$why")"
}

cleanup() {
  local rc=$?
  set +e
  jobs -p | xargs -r kill 2>/dev/null  # background runs of this script (the pair), if interrupted
  tl_stop_tallyd
  rm -rf "$TMPD"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fatal() { say "ERROR: $*"; say "$PASS_N passed, $((FAIL_N + 1)) failed"; exit 1; }

say "== tally PyTorch suite: build=$BUILD"
say "GPU: $(nvidia-smi -L 2>/dev/null | head -n 1)"
say "python: $PY ($(env -u LD_PRELOAD "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -n 1))"
[[ -x $TALLYD ]] || fatal "tallyd not built: $TALLYD"
[[ -f $CLIENT_LIB ]] || fatal "client library not built: $CLIENT_LIB"
tl_libcuda_dir "$CLIENT_LIB" "$LIBCUDA_DIR" || fatal "cannot create $LIBCUDA_DIR"

# Every case file must be in ALL_CASES (a forgotten case would silently never run).
for f in "$HERE"/cases/*.py; do
  n=$(basename "$f" .py)
  if [[ " ${ALL_CASES[*]} ${HELPERS[*]} " != *" $n "* ]]; then
    record FAIL "$n" suite "" "cases/$n.py is not listed in ALL_CASES of run_suite.sh"
  fi
done

CASES=()
for c in "${ALL_CASES[@]}"; do
  [[ -f $HERE/cases/$c.py ]] || { record FAIL "$c" suite "" "cases/$c.py does not exist"; continue; }
  if [[ -n ${PYTORCH_SUITE_ONLY:-} && " $PYTORCH_SUITE_ONLY " != *" $c "* ]]; then continue; fi
  if [[ " ${PYTORCH_SUITE_SKIP:-} " == *" $c "* ]]; then say "note: skipping $c (PYTORCH_SUITE_SKIP)"; continue; fi
  CASES+=("$c")
done
TRANSPORTS=(uds)
[[ ${PYTORCH_SUITE_TCP:-0} == 1 ]] && TRANSPORTS+=(tcp)

# ---------------------------------------------------------------- hiding the GPU
tl_setup_hide "$TMPD" "${PYTORCH_SUITE_NO_HIDE:-}"
[[ -n $TL_HIDE_NOTE ]] && say "$TL_HIDE_NOTE"
if [[ $TL_HIDE -eq 1 ]]; then
  # Proof: inside the namespace, torch on its own (no client) sees no GPU.
  tl_hidden timeout -k 5 120 env -u LD_PRELOAD "$PY" -c \
    'import sys, torch; print("cuda available:", torch.cuda.is_available()); sys.exit(0 if torch.cuda.is_available() else 3)' \
    >"$RUNS/hidden_proof.out" 2>&1
  rc=$?
  if [[ $rc -eq 3 ]]; then
    record PASS hidden-proof native "" "torch sees no GPU inside the namespace"
  else
    record FAIL hidden-proof native "" "torch in the namespace exited $rc (3 = no GPU expected)"
    tail -n 5 "$RUNS/hidden_proof.out" | indent
  fi
fi

# ---------------------------------------------------------------- tallyd
TALLYD_LOG=$RES/tallyd.log
read -r -a TALLYD_EXTRA <<<"$(tl_library_dir_args "$PY") ${PYTORCH_SUITE_TALLYD_ARGS:-}"
tl_start_tallyd "$TALLYD" "$SOCK" "$TALLYD_LOG" "${TALLYD_EXTRA[@]}" 2>>"$LOG" || {
  tail -n 20 "$TALLYD_LOG" | indent
  fatal "tallyd did not start"
}
say "tallyd pid $TL_TALLYD_PID on unix:$SOCK and tcp://127.0.0.1:$TL_PORT ${TALLYD_EXTRA[*]}"

ensure_tallyd() {  # before a run through tallyd: restart it (recorded as a failure) if it died
  tl_tallyd_alive && return 0
  # Cases running at once would each start one; only a serial suite restarts it.
  ((${PYTORCH_SUITE_JOBS:-1} > 1)) && { record FAIL tallyd alive "" "tallyd had exited before $1 (see $TALLYD_LOG)"; return 1; }
  record FAIL tallyd alive "" "tallyd had exited before $1; restarting it (see $TALLYD_LOG)"
  tl_start_tallyd "$TALLYD" "$SOCK" "$TALLYD_LOG" "${TALLYD_EXTRA[@]}" 2>>"$LOG"
}

# ---------------------------------------------------------------- one run
header() { sed -n "1,40s/^# suite-$1: *//p" "$HERE/cases/$2.py"; }

# run_case <case> <transport> [priority]: runs it in the foreground; writes runs/<case>.<transport>
# .out/.err/.rc/.secs (files, so that it can also run in the background).
run_case() {
  local case=$1 transport=$2 priority=${3:-${PYTORCH_SUITE_PRIORITY:-best-effort}}
  local base=$RUNS/$case.$transport cache=$TMPD/cache/$case.$transport limit
  limit=$(header timeout "$case" | head -n 1)
  limit=${limit:-$DEFAULT_TIMEOUT}
  # Same environment natively and through tallyd; a fresh compiler cache per run so that
  # torch.compile really compiles (and Triton really loads kernels) every time.
  local -a envs=(CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONHASHSEED=0 "OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}"
                 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
                 "TORCHINDUCTOR_CACHE_DIR=$cache/inductor" "TRITON_CACHE_DIR=$cache/triton"
                 "TRITON_HOME=$cache/triton_home")
  local -a case_env
  mapfile -t case_env < <(header env "$case")
  envs+=("${case_env[@]}")
  local -a cmd=(timeout -k 10 "$limit")
  if [[ $transport == native* ]]; then
    cmd+=(env -u LD_PRELOAD -u TALLY_SERVER -u TRITON_LIBCUDA_PATH "${envs[@]}")
  else
    local url="unix:$SOCK"
    [[ $transport == tcp* ]] && url="tcp://127.0.0.1:$TL_PORT"
    tl_client_env "$CLIENT_LIB" "$url" "pytorch-$case-$transport" "$priority" "$LIBCUDA_DIR"
    [[ $TL_HIDE -eq 1 ]] && cmd+=(unshare -m bash -c "$TL_HIDE_SCRIPT" bash "$TL_OLDDEV")
    cmd+=(env "${envs[@]}" "${TL_CLIENT_ENV[@]}")
  fi
  cmd+=("$PY" "$HERE/cases/$case.py")
  printf '%q ' "${cmd[@]}" >"$base.cmd"
  local t0 rc=0
  t0=$(date +%s.%N)
  "${cmd[@]}" >"$base.out" 2>"$base.err" || rc=$?
  echo "$rc" >"$base.rc"
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }' >"$base.secs"
  echo "$limit" >"$base.limit"
}

# evaluate <case> <transport>: compares the run with the native one (or checks the native run)
# and records the verdict; returns compare.py's exit status (3: values differ).
evaluate() {
  local case=$1 transport=$2
  local base=$RUNS/$case.$transport ref=$RUNS/$case.native
  local rc secs verdict code why
  rc=$(cat "$base.rc") secs=$(cat "$base.secs")
  if [[ $transport == native ]]; then
    verdict=$("${COMPARE[@]}" --check "$base.out" --got-rc "$rc")
  else
    verdict=$("${COMPARE[@]}" "$ref.out" "$base.out" --ref-rc "$(cat "$ref.rc")" --got-rc "$rc" \
      --floor-rtol "${PYTORCH_SUITE_FLOOR_RTOL:-0}" --floor-atol "${PYTORCH_SUITE_FLOOR_ATOL:-0}")
  fi
  code=$?
  why=$(head -n 1 <<<"$verdict")
  why=${why#PASS }
  why=${why#FAIL }
  [[ $rc -eq 124 || $rc -eq 137 ]] && why="timed out after $(cat "$base.limit")s; $why"
  if [[ $code -eq 0 ]]; then
    record PASS "$case" "$transport" "$secs" "$why"
    return 0
  fi
  record FAIL "$case" "$transport" "$secs" "$why"
  tail -n +2 <<<"$verdict" | head -n 20 | indent
  if [[ -s $base.err ]]; then
    say "    stderr (last 12 lines of $base.err, C++ stack frames left out):"
    grep -v -E '^(frame #|<omitting python frames>|[[:space:]]*$)' "$base.err" | tail -n 12 | cut -c1-300 | indent
  fi
  return "$code"
}

# When a run differs from native: is the native run itself reproducible? (Once per case.)
native_repeat() {
  local case=$1
  [[ -f $RUNS/$case.native-repeat.rc ]] && return 0
  run_case "$case" native-repeat
  if evaluate "$case" native-repeat; then
    say "    note: a second native run of $case matched the first: the difference comes from tallyd"
  else
    say "    note: $case is not reproducible natively: fix the case (or its tolerance) first"
  fi
}

# nvidia-smi while one case runs through tallyd: the client's own pid must never hold a context.
watch_smi() {  # watch_smi <case> <transport>
  local smi=$RUNS/$1.$2.nvidia-smi
  : >"$smi"
  run_case "$1" "$2" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    nvidia-smi --query-compute-apps=pid --format=csv,noheader >>"$smi" 2>&1
    sleep 0.25
  done
  wait "$pid"
  local client_pid
  client_pid=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[2]); import compare; d, _ = compare.load_result(sys.argv[1]); print(d["info"]["pid"] if d else "")' \
    "$RUNS/$1.$2.out" "$HERE" 2>/dev/null)
  if [[ -z $client_pid ]]; then
    say "note: no client pid in $1's output; nvidia-smi check skipped"
  elif ! grep -qE '^[[:space:]]*[0-9]+' "$smi"; then
    say "note: nvidia-smi listed no compute processes (pid namespace?); cannot confirm who holds the GPU"
  elif grep -qE "^[[:space:]]*${client_pid}[[:space:]]*$" "$smi"; then
    record FAIL "$1" nvidia-smi "" "the client process (pid $client_pid) held its own GPU context"
  else
    record PASS "$1" nvidia-smi "" "client pid $client_pid never listed by nvidia-smi (tallyd pid $TL_TALLYD_PID)"
  fi
}

# ---------------------------------------------------------------- the runs
SMI_CASE=${PYTORCH_SUITE_SMI_CASE-tensor_ops}
suite_case() {  # suite_case <case>: the native reference, then every transport
  local case=$1 transport
  say "-- $case"
  run_case "$case" native
  if ! evaluate "$case" native; then
    say "    (the native run is the reference: without it the runs through tallyd cannot pass)"
  fi
  if [[ ${PYTORCH_SUITE_NATIVE_TWICE:-0} == 1 ]]; then
    run_case "$case" native-repeat
    evaluate "$case" native-repeat
  fi
  for transport in "${TRANSPORTS[@]}"; do
    ensure_tallyd "$case $transport" || { record FAIL "$case" "$transport" "" "tallyd could not be restarted"; continue; }
    if [[ $transport == uds && $case == "$SMI_CASE" ]]; then
      watch_smi "$case" "$transport"
    else
      run_case "$case" "$transport"
    fi
    evaluate "$case" "$transport"
    [[ $? -eq 3 ]] && native_repeat "$case"
  done
}

# Cases are independent processes with their own caches and results, so they may overlap
# (PYTORCH_SUITE_JOBS); the verdicts are counted from results.tsv afterwards.
# (Waits name the case pids: tallyd is a background job of this shell too.)
JOBS=${PYTORCH_SUITE_JOBS:-1}
CASE_PIDS=()
for case in "${CASES[@]}"; do
  if ((JOBS > 1)); then
    while true; do
      running=()
      for pid in "${CASE_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && running+=("$pid"); done
      CASE_PIDS=("${running[@]}")
      ((${#CASE_PIDS[@]} < JOBS)) && break
      sleep 0.5
    done
    suite_case "$case" &
    CASE_PIDS+=($!)
  else
    suite_case "$case"
  fi
done
for pid in "${CASE_PIDS[@]}"; do wait "$pid"; done
recount() {
  PASS_N=$(grep -c '^PASS' "$RESULTS")
  FAIL_N=$(grep -c '^FAIL' "$RESULTS")
}
recount

# ---------------------------------------------------------------- two tenants at once
read -r -a PAIR <<<"${PYTORCH_SUITE_PAIR-resnet50 bert_base}"
if [[ ${#PAIR[@]} -eq 2 ]]; then
  say "-- two tenants at once over UDS: ${PAIR[0]} (high priority) + ${PAIR[1]} (best-effort)"
  for c in "${PAIR[@]}"; do  # the native references, if the main loop did not make them
    [[ -f $RUNS/$c.native.rc ]] || { run_case "$c" native; evaluate "$c" native; }
  done
  if ensure_tallyd "the pair"; then
    # Both build their models, then meet (cases/suite_common.py), so that their GPU work overlaps.
    mkdir -p "$TMPD/rendezvous"
    SUITE_RENDEZVOUS="$TMPD/rendezvous:2" run_case "${PAIR[0]}" uds-pair-hp high &
    hp=$!
    SUITE_RENDEZVOUS="$TMPD/rendezvous:2" run_case "${PAIR[1]}" uds-pair-be best-effort &
    be=$!
    wait "$hp" "$be"
    evaluate "${PAIR[0]}" uds-pair-hp
    evaluate "${PAIR[1]}" uds-pair-be
    overlap=$(python3 - "$RUNS/${PAIR[0]}.uds-pair-hp.out" "$RUNS/${PAIR[1]}.uds-pair-be.out" "$HERE" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import compare
w = []
for f in sys.argv[1:3]:
    d, _ = compare.load_result(f)
    i = (d or {}).get("info", {})
    w.append((i.get("work_began"), i.get("work_ended"), i.get("rendezvous")))
if any(b is None or e is None for b, e, _ in w):
    print("FAIL no work window in the results (%s)" % [r for _, _, r in w])
else:
    both = min(e for _, e, _ in w) - max(b for b, _, _ in w)
    print(("PASS" if both > 0 else "FAIL") + " GPU work overlapped for %.1f s (rendezvous: %s)" % (both, ", ".join(str(r) for _, _, r in w)))
PY
)
    record "${overlap%% *}" pair uds-overlap "" "${overlap#* }"
  else
    record FAIL pair uds "" "tallyd could not be restarted"
  fi
elif [[ ${#PAIR[@]} -ne 0 ]]; then
  record FAIL pair uds "" "PYTORCH_SUITE_PAIR must name two cases, got '${PYTORCH_SUITE_PAIR:-}'"
fi

# ---------------------------------------------------------------- summary
recount
tl_tallyd_alive || { record FAIL tallyd alive "" "tallyd exited during the suite"; tail -n 20 "$TALLYD_LOG" | indent; }
say "results: $RES (suite.log, results.tsv, tallyd.log, runs/)"
say "$PASS_N passed, $FAIL_N failed"
if [[ -n ${PYTORCH_SUITE_OUT:-} ]]; then
  "${COMPARE[@]}" --summarize "$RESULTS" --out "$PYTORCH_SUITE_OUT" --extra "build=$BUILD" \
    --extra "gpu=$(nvidia-smi -L 2>/dev/null | head -n 1)" --extra "results_dir=$RES" --extra "hidden=$TL_HIDE" | indent
fi
[[ $FAIL_N -eq 0 ]]
