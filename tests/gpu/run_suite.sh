#!/usr/bin/env bash
# GPU test suite driver.
#
#   tests/gpu/run_suite.sh <build dir>
#
# Runs every tests/gpu program natively (reference output), then through one
# tallyd instance over a Unix socket and over TCP, with the client in a mount
# namespace that hides the GPU (when run as root), and diffs stdout.
# Exit codes: 0 all passed, 1 something failed, 77 no GPU visible (skip).
#
# Environment knobs:
#   GPU_SUITE_SKIP="a b"   program names to leave out (default "kernel_printf": device printf
#                          output of a shared context goes to tallyd's stdout, not the tenant's;
#                          set GPU_SUITE_SKIP="" to run it anyway)
#   GPU_SUITE_ONLY="a b"   run only these programs
#   GPU_SUITE_TIMEOUT=300  per-run timeout in seconds
#   GPU_SUITE_SMI_PROGRAM=large_transfers  program observed with nvidia-smi
#   GPU_SUITE_NO_HIDE=1    debugging only: never hide the GPU from clients
#   GPU_SUITE_TALLYD_ARGS  extra tallyd options, e.g. "--transform stress --cache-dir DIR"
#   GPU_SUITE_PRIORITY_PAIR=1  after each program's UDS and TCP runs, run it twice at once over
#                          UDS, as a high-priority and a best-effort tenant (with
#                          GPU_SUITE_TALLYD_ARGS="--policy priority --gate --transform stress",
#                          or with "--sm-partition 24:overlap,40 --hp-p99-budget 2x": the
#                          scheduler's GPU tests; plain "--policy priority" is stream priorities only)
#   GPU_SUITE_CLIENT_PRIORITY=high  the single (UDS, TCP) runs as high-priority tenants (their
#                          launches then go through tallyd's launch threads; default best-effort)
#   GPU_SUITE_PAIR_SKIP="host_threads"  programs left out of the pairs, with a printed reason
#   GPU_SUITE_UDS_ONLY="host_register managed_memory graph_host_nodes"  programs not run over TCP,
#                          with a printed reason (device pointers of registered host memory, managed
#                          memory and graph host nodes need memory shared over a Unix socket)
#   OUT=<dir>              if set, a copy of the logs/results is written there
set -euo pipefail

usage() { echo "usage: $0 <build dir>" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
[[ -d $1 ]] || { echo "error: build dir '$1' does not exist" >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
BIN=$BUILD/tests/gpu
TALLYD=$BUILD/server/tallyd
CLIENT_LIB=$BUILD/client/libtally_client.so
RUN_TIMEOUT=${GPU_SUITE_TIMEOUT:-300}
SMI_PROGRAM=${GPU_SUITE_SMI_PROGRAM:-large_transfers}
CONCURRENT_PROGRAMS=(host_threads large_transfers)
# Programs whose kernels wait for a later call of their own tenant: not run as HP+BE pairs.
PAIR_SKIP=${GPU_SUITE_PAIR_SKIP-host_threads}
# Programs that need memory shared with tallyd (a Unix socket): not run over TCP.
UDS_ONLY=${GPU_SUITE_UDS_ONLY-host_register managed_memory graph_host_nodes}

# Keep in sync with TALLY_GPU_TEST_PROGRAMS in CMakeLists.txt (static_runtime: its own target,
# linked with the static CUDA runtime).
ALL_PROGRAMS=(
  vector_add reduction_atomics grids_2d_3d dynamic_smem templates_structs symbols
  streams_events pinned_async host_threads driver_ptx error_cases memcpy_2d
  host_callbacks coop_launch_ex device_query large_transfers bulk_copies launch_order warp_ops kernel_printf
  stream_ordered_alloc virtual_memory ipc_two_process graph_capture cublas_forwarding cufft_forwarding driver_contexts
  stream_memory_ops graph_explicit jit_link textures_surfaces visible_devices host_register managed_memory
  library_management graph_host_nodes per_thread_stream static_runtime programmatic_launch
)

# ---------------------------------------------------------------- GPU present?
skip_reason=""
if [[ ! -e /dev/nvidia0 ]]; then
  skip_reason="no /dev/nvidia0"
elif ! command -v nvidia-smi >/dev/null 2>&1; then
  skip_reason="nvidia-smi not found"
elif ! nvidia-smi -L >/dev/null 2>&1; then
  skip_reason="nvidia-smi -L failed"
fi
if [[ -n $skip_reason ]]; then
  echo "SKIP: no GPU visible to tallyd ($skip_reason)"
  exit 77
fi

# ---------------------------------------------------------------- bookkeeping
RES=$BIN/suite_results
rm -rf "$RES"
mkdir -p "$RES/runs"
LOG=$RES/suite.log
RESULTS=$RES/results.txt
: >"$LOG"
: >"$RESULTS"
TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-gpu-suite.XXXXXX")
SOCK=$TMPD/tallyd.sock
TALLYD_PID=""
PASS_N=0
FAIL_N=0

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
indent() { sed 's/^/    | /' | tee -a "$LOG"; }

record() {  # record PASS|FAIL <program> <transport> [detail]
  local status=$1 prog=$2 transport=$3 detail=${4:-}
  if [[ $status == PASS ]]; then PASS_N=$((PASS_N + 1)); else FAIL_N=$((FAIL_N + 1)); fi
  local line
  line=$(printf '%-4s %-20s %-15s %s' "$status" "$prog" "$transport" "$detail")
  printf '%s\n' "$line" >>"$RESULTS"
  say "$line"
}

copy_out() {
  [[ -n ${OUT:-} ]] || return 0
  mkdir -p "$OUT" 2>/dev/null || return 0
  cp -f "$LOG" "$OUT/gpu_suite.log" 2>/dev/null || true
  cp -f "$RESULTS" "$OUT/gpu_suite_results.txt" 2>/dev/null || true
  [[ -f $RES/tallyd.log ]] && cp -f "$RES/tallyd.log" "$OUT/tallyd.log" 2>/dev/null
  tar -C "$RES" -czf "$OUT/gpu_suite_runs.tar.gz" runs 2>/dev/null || true
}

cleanup() {
  local rc=$?
  set +e
  if [[ -n $TALLYD_PID ]] && kill -0 "$TALLYD_PID" 2>/dev/null; then
    kill -TERM "$TALLYD_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$TALLYD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$TALLYD_PID" 2>/dev/null && kill -KILL "$TALLYD_PID" 2>/dev/null
    wait "$TALLYD_PID" 2>/dev/null
  fi
  copy_out
  rm -rf "$TMPD"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fatal() { say "ERROR: $*"; say "$PASS_N passed, $((FAIL_N + 1)) failed"; exit 1; }

# ---------------------------------------------------------------- programs
PROGRAMS=()
for p in "${ALL_PROGRAMS[@]}"; do
  if [[ -n ${GPU_SUITE_ONLY:-} && " $GPU_SUITE_ONLY " != *" $p "* ]]; then continue; fi
  if [[ " ${GPU_SUITE_SKIP-kernel_printf} " == *" $p "* ]]; then
    say "note: skipping $p (GPU_SUITE_SKIP${GPU_SUITE_SKIP+=$GPU_SUITE_SKIP}; kernel_printf: device printf goes to tallyd's stdout)"
    continue
  fi
  PROGRAMS+=("$p")
done

say "== tally GPU suite: build=$BUILD"
say "GPU: $(nvidia-smi -L 2>/dev/null | head -n 1)"
[[ -x $TALLYD ]] || fatal "tallyd not built: $TALLYD"
[[ -f $CLIENT_LIB ]] || fatal "client library not built: $CLIENT_LIB"

# Extra client environment: a libcuda.so.1 shim next to the client library
# (if the client build provides one) must win over the hidden real driver.
CLIENT_LD_PATH=""
if [[ -e $BUILD/client/libcuda.so.1 ]]; then
  CLIENT_LD_PATH=$BUILD/client${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  say "note: $BUILD/client/libcuda.so.1 exists; clients get LD_LIBRARY_PATH=$CLIENT_LD_PATH"
fi

# ---------------------------------------------------------------- hiding the GPU
# Inner script, run as: bash -c "$HIDE_SCRIPT" bash <olddev dir> <command...> (tests/gpu/hide_gpu.sh)
HIDE_SCRIPT=$(<"$(dirname "${BASH_SOURCE[0]}")/hide_gpu.sh")
HIDE=0
if [[ -n ${GPU_SUITE_NO_HIDE:-} ]]; then
  say "WARNING: GPU_SUITE_NO_HIDE is set: clients run WITHOUT hiding the GPU"
elif [[ $(id -u) -eq 0 ]]; then
  if command -v unshare >/dev/null 2>&1 && unshare -m bash -c "$HIDE_SCRIPT" bash "$TMPD/olddev" true 2>"$RES/runs/hide_probe.err"; then
    HIDE=1
  else
    say "WARNING: running as root but a mount namespace could not be set up; clients run WITHOUT hiding the GPU"
    indent <"$RES/runs/hide_probe.err"
  fi
else
  say "note: not root (uid $(id -u)): clients run WITHOUT hiding the GPU"
fi

run_hidden() {  # run_hidden <command...>
  if [[ $HIDE -eq 1 ]]; then
    unshare -m bash -c "$HIDE_SCRIPT" bash "$TMPD/olddev" "$@"
  else
    "$@"
  fi
}

# Proof: inside the namespace a native (non-tally) program sees no GPU.
if [[ $HIDE -eq 1 ]]; then
  if [[ -x $BIN/gpu_device_query ]]; then
    rc=0
    run_hidden timeout -k 5 60 "$BIN/gpu_device_query" >"$RES/runs/hidden_proof.out" 2>&1 || rc=$?
    say "hidden-GPU proof: native gpu_device_query inside the namespace exited $rc:"
    head -n 5 "$RES/runs/hidden_proof.out" | indent
    if [[ $rc -ne 0 ]] && ! grep -q '^name:' "$RES/runs/hidden_proof.out"; then
      record PASS device_query hidden-proof "GPU not visible inside the namespace"
    else
      record FAIL device_query hidden-proof "GPU still visible inside the namespace"
    fi
  else
    record FAIL device_query hidden-proof "gpu_device_query not built"
  fi
fi

# ---------------------------------------------------------------- tallyd
pick_port() {
  local p
  if command -v python3 >/dev/null 2>&1; then
    if p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null); then
      echo "$p"; return 0
    fi
  fi
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}
PORT=$(pick_port) || fatal "could not find a free TCP port"
# shellcheck disable=SC2086  # GPU_SUITE_TALLYD_ARGS is a word list, e.g. "--transform stress"
"$TALLYD" --listen "unix:$SOCK" --listen "tcp://127.0.0.1:$PORT" ${GPU_SUITE_TALLYD_ARGS:-} >"$RES/tallyd.log" 2>&1 &
TALLYD_PID=$!
say "tallyd pid $TALLYD_PID listening on unix:$SOCK and tcp://127.0.0.1:$PORT"
for _ in $(seq 1 100); do
  [[ -S $SOCK ]] && break
  kill -0 "$TALLYD_PID" 2>/dev/null || { tail -n 20 "$RES/tallyd.log" | indent; fatal "tallyd exited during startup"; }
  sleep 0.1
done
[[ -S $SOCK ]] || { tail -n 20 "$RES/tallyd.log" | indent; fatal "tallyd socket $SOCK did not appear within 10 s"; }
if command -v ss >/dev/null 2>&1; then
  for _ in $(seq 1 50); do
    ss -ltnH "sport = :$PORT" 2>/dev/null | grep -q . && break
    sleep 0.1
  done
fi

transport_url() {
  case $1 in
    uds*) echo "unix:$SOCK" ;;
    tcp*) echo "tcp://127.0.0.1:$PORT" ;;
  esac
}

# client_cmd <program> <transport> <tenant>: prints nothing, sets CMD array
client_cmd() {
  local prog=$1 transport=$2 tenant=$3
  CMD=(timeout -k 10 "$RUN_TIMEOUT")
  if [[ $HIDE -eq 1 ]]; then CMD+=(unshare -m bash -c "$HIDE_SCRIPT" bash "$TMPD/olddev"); fi
  local priority=${GPU_SUITE_CLIENT_PRIORITY:-best-effort}
  [[ $transport == *-hp ]] && priority=high
  CMD+=(env "LD_PRELOAD=$CLIENT_LIB" "TALLY_SERVER=$(transport_url "$transport")" "TALLY_TENANT=$tenant"
        "TALLY_PRIORITY=$priority")
  if [[ -n $CLIENT_LD_PATH ]]; then CMD+=("LD_LIBRARY_PATH=$CLIENT_LD_PATH"); fi
  CMD+=("$BIN/gpu_$prog")
}

# compare <program> <transport> <rc>: record PASS/FAIL against the native output
compare() {
  local prog=$1 transport=$2 rc=$3
  local ref=$RES/runs/$prog.native.out got=$RES/runs/$prog.$transport.out
  if [[ $rc -eq 0 ]] && cmp -s "$ref" "$got"; then
    record PASS "$prog" "$transport"
    return
  fi
  local why="exit $rc"
  [[ $rc -eq 124 || $rc -eq 137 ]] && why="timed out after ${RUN_TIMEOUT}s (exit $rc)"
  cmp -s "$ref" "$got" || why="$why, stdout differs from native"
  record FAIL "$prog" "$transport" "$why"
  diff -u "$ref" "$got" >"$RES/runs/$prog.$transport.diff" 2>&1 || true
  head -n 30 "$RES/runs/$prog.$transport.diff" | indent
  if [[ -s $RES/runs/$prog.$transport.err ]]; then
    say "    stderr (last 10 lines):"
    tail -n 10 "$RES/runs/$prog.$transport.err" | indent
  fi
}

# Classify a pid seen by nvidia-smi: tallyd, a descendant of tallyd, or other.
classify_pid() {
  local pid=$1 cur=$1 depth=0
  [[ $pid == "$TALLYD_PID" ]] && { echo tallyd; return; }
  while [[ -r /proc/$cur/status && $depth -lt 32 ]]; do
    cur=$(awk '/^PPid:/ {print $2}' "/proc/$cur/status" 2>/dev/null || echo 0)
    [[ -z $cur || $cur == 0 || $cur == 1 ]] && break
    [[ $cur == "$TALLYD_PID" ]] && { echo tallyd-child; return; }
    depth=$((depth + 1))
  done
  echo other
}

# ---------------------------------------------------------------- the runs
for prog in "${PROGRAMS[@]}"; do
  exe=$BIN/gpu_$prog
  say "-- $prog"
  if [[ ! -x $exe ]]; then
    record FAIL "$prog" native "not built: $exe"
    record FAIL "$prog" uds "not built"
    record FAIL "$prog" tcp "not built"
    continue
  fi
  rc=0
  timeout -k 10 "$RUN_TIMEOUT" "$exe" >"$RES/runs/$prog.native.out" 2>"$RES/runs/$prog.native.err" || rc=$?
  if [[ $rc -eq 0 ]]; then
    record PASS "$prog" native
  else
    record FAIL "$prog" native "exit $rc"
    tail -n 15 "$RES/runs/$prog.native.out" | indent
  fi

  for transport in uds tcp; do
    if [[ $transport == tcp && " $UDS_ONLY " == *" $prog "* ]]; then
      say "    tcp: not run: over TCP registered host memory, managed memory and graph host nodes need memory shared with tallyd (GPU_SUITE_UDS_ONLY)"
      continue
    fi
    client_cmd "$prog" "$transport" "$prog"
    out=$RES/runs/$prog.$transport.out err=$RES/runs/$prog.$transport.err
    rc=0
    if [[ $transport == uds && $prog == "$SMI_PROGRAM" ]]; then
      # Observe which processes hold a GPU context while this client runs.
      smi=$RES/runs/nvidia-smi-apps.txt
      : >"$smi"
      "${CMD[@]}" >"$out" 2>"$err" &
      cpid=$!
      while kill -0 "$cpid" 2>/dev/null; do
        nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader >>"$smi" 2>&1 || true
        echo "--" >>"$smi"
        sleep 0.25
      done
      wait "$cpid" || rc=$?
      compare "$prog" "$transport" "$rc"
      declare -A seen=()
      bad_pids=""
      while IFS=, read -r spid sname; do
        spid=${spid//[[:space:]]/}
        [[ $spid =~ ^[0-9]+$ ]] || continue
        [[ -n ${seen[$spid]:-} ]] && continue
        seen[$spid]="$(classify_pid "$spid") ${sname# }"
      done <"$smi"
      say "nvidia-smi compute apps while $prog ran through tallyd (tallyd pid $TALLYD_PID):"
      if [[ ${#seen[@]} -eq 0 ]]; then
        say "    (none listed)"
        say "WARN nvidia-smi listed no compute processes; cannot confirm that only tallyd uses the GPU"
      else
        for spid in "${!seen[@]}"; do
          say "    pid $spid: ${seen[$spid]}"
          [[ ${seen[$spid]} == tallyd* ]] || bad_pids="$bad_pids $spid"
        done
        if [[ -z $bad_pids ]]; then
          record PASS "$prog" nvidia-smi "only tallyd (pid $TALLYD_PID) holds the GPU"
        else
          record FAIL "$prog" nvidia-smi "non-tallyd GPU processes:$bad_pids"
        fi
      fi
      unset seen
    else
      "${CMD[@]}" >"$out" 2>"$err" || rc=$?
      compare "$prog" "$transport" "$rc"
    fi
  done
  if [[ ${GPU_SUITE_PRIORITY_PAIR:-0} == 1 && " $PAIR_SKIP " == *" $prog "* ]]; then
    say "SKIP $prog as an HP+BE pair: its kernel spins until its own tenant's next call, and in one shared"
    say "     context the other tenant's module load waits for every running kernel (bench/micro/implicit_sync_probe);"
    say "     run such programs in their own tallyd (docs/scheduler.md, 'What a shared context cannot do')"
  elif [[ ${GPU_SUITE_PRIORITY_PAIR:-0} == 1 ]]; then
    declare -A pair_pids=()
    for transport in uds-hp uds-be; do
      client_cmd "$prog" "$transport" "$prog-${transport#uds-}"
      "${CMD[@]}" >"$RES/runs/$prog.$transport.out" 2>"$RES/runs/$prog.$transport.err" &
      pair_pids[$transport]=$!
    done
    for transport in uds-hp uds-be; do
      rc=0
      wait "${pair_pids[$transport]}" || rc=$?
      compare "$prog" "$transport" "$rc"
    done
    unset pair_pids
  fi
done

# ---------------------------------------------------------------- concurrent tenants
say "-- concurrent tenants over UDS: ${CONCURRENT_PROGRAMS[*]}"
declare -A cpids=()
for prog in "${CONCURRENT_PROGRAMS[@]}"; do
  [[ " ${PROGRAMS[*]} " == *" $prog "* ]] || { say "note: $prog not selected; skipped in the concurrent run"; continue; }
  [[ -x $BIN/gpu_$prog ]] || continue
  client_cmd "$prog" uds-concurrent "$prog-concurrent"
  "${CMD[@]}" >"$RES/runs/$prog.uds-concurrent.out" 2>"$RES/runs/$prog.uds-concurrent.err" &
  cpids[$prog]=$!
done
for prog in "${!cpids[@]}"; do
  rc=0
  wait "${cpids[$prog]}" || rc=$?
  compare "$prog" uds-concurrent "$rc"
done

# ---------------------------------------------------------------- summary
if ! kill -0 "$TALLYD_PID" 2>/dev/null; then
  record FAIL tallyd alive "tallyd exited during the suite"
  tail -n 20 "$RES/tallyd.log" | indent
fi
say "results: $RES (logs, outputs, diffs)"
say "$PASS_N passed, $FAIL_N failed"
[[ $FAIL_N -eq 0 ]]
