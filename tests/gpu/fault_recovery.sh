#!/usr/bin/env bash
# Fault recovery on a real GPU (issue #7): one tenant's kernel asserts, reads an illegal address, or
# runs past kernel_timeout_s, while two other tenants are busy. Every round checks that
#   - the faulting tenant sees the native error (cudaErrorAssert / cudaErrorIllegalAddress /
#     cudaErrorLaunchTimeout), and keeps seeing it;
#   - each busy tenant sees cudaErrorContextIsDestroyed (tallyd's documented error), and keeps it;
#   - a tenant that connects afterwards runs correctly; the time from the fault to its first
#     correct result is the recovery time.
# Before the rounds: memory a tenant freed reads as zeros in another tenant's allocation (while a
# third tenant keeps tallyd's memory pool alive). After: tallyd is the same process (it starts over
# by exec), with as many threads and descriptors as before, and GPU memory back to where it was.
#
#   tests/gpu/fault_recovery.sh <build dir>     (FAULT_ROUNDS=20 by default; OUT=<dir> keeps results;
#                                                FAULT_KINDS="assert illegal hang" by default, in turn)
# Exit: 0 all passed, 1 a check failed, 77 no GPU visible (skip).
set -uo pipefail
[[ $# -eq 1 && -d $1 ]] || { echo "usage: $0 <build dir>" >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TENANT_BIN=$BUILD/tests/gpu/gpu_fault_tenant
ROUNDS=${FAULT_ROUNDS:-20}
TIMEOUT_S=3

if [[ ! -e /dev/nvidia0 ]] || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no GPU visible to tallyd (no /dev/nvidia0 or nvidia-smi -L failed)"
  exit 77
fi

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-fault.XXXXXX")
SOCK=$TMPD/tallyd.sock
LOG=$TMPD/tallyd.log
RESULTS=$TMPD/results.jsonl
PASS_N=0
FAIL_N=0
TALLYD_PID=""

cleanup() {
  [[ -n $TALLYD_PID ]] && kill -TERM "$TALLYD_PID" 2>/dev/null && sleep 1 && kill -KILL "$TALLYD_PID" 2>/dev/null
  if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT" && cp -f "$LOG" "$OUT/fault_recovery_tallyd.log" && cp -f "$RESULTS" "$OUT/fault_recovery.jsonl"
    tar -C "$TMPD" -czf "$OUT/fault_recovery_runs.tar.gz" runs 2>/dev/null
  fi
  rm -rf "$TMPD"
}
trap cleanup EXIT
mkdir -p "$TMPD/runs"
: >"$RESULTS"

record() {  # record PASS|FAIL <what> <detail>
  if [[ $1 == PASS ]]; then PASS_N=$((PASS_N + 1)); else FAIL_N=$((FAIL_N + 1)); fi
  printf '%-4s %-28s %s\n' "$1" "$2" "$3"
}

HIDE=()
if [[ $(id -u) -eq 0 ]] && unshare -m bash "$HERE/hide_gpu.sh" "$TMPD/olddev" true 2>/dev/null; then
  HIDE=(unshare -m bash "$HERE/hide_gpu.sh" "$TMPD/olddev")
else
  echo "note: clients run WITHOUT the GPU hidden (not root, or no mount namespace)"
fi

tenant() {  # tenant <name> <mode> <output file>: runs one client with the GPU hidden
  timeout -k 5 180 "${HIDE[@]}" env LD_PRELOAD="$BUILD/client/libtally_client.so" TALLY_SERVER="unix:$SOCK" \
    TALLY_TENANT="$1" "$TENANT_BIN" "$2" >"$3" 2>"$3.err"
}

now_ms() { date +%s%3N; }
threads_of() { ls "/proc/$1/task" | wc -l; }
fds_of() { ls "/proc/$1/fd" | wc -l; }
gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1 | tr -d ' '; }

cat >"$TMPD/tallyd.toml" <<EOF
listen = ["unix:$SOCK"]
admin_socket = "$TMPD/admin.sock"
kernel_timeout_s = $TIMEOUT_S
fault_quarantine_after = 2
fault_quarantine_window_s = 600
fault_quarantine_s = 300
EOF
"$BUILD/server/tallyd" --config "$TMPD/tallyd.toml" >"$LOG" 2>&1 &
TALLYD_PID=$!
for _ in $(seq 1 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || { tail -n 20 "$LOG"; echo "FAIL: tallyd did not start"; exit 1; }

# A tenant that connects after a fault: retried until tallyd serves again (at most 30 s).
first_good_tenant() {  # first_good_tenant <label>: prints the ms it took
  local start; start=$(now_ms)
  for attempt in $(seq 1 60); do
    if tenant "fresh-$1-$attempt" fresh "$TMPD/runs/$1.fresh.out" && grep -qx ok "$TMPD/runs/$1.fresh.out"; then
      echo $(($(now_ms) - start)); return 0
    fi
    sleep 0.5
  done
  return 1
}

# ---- warm-up and baseline
first_good_tenant warmup >/dev/null || { echo "FAIL: a plain tenant does not run through tallyd"; exit 1; }
base_threads=$(threads_of "$TALLYD_PID"); base_fds=$(fds_of "$TALLYD_PID"); base_gpu=$(gpu_used_mib)
echo "baseline: tallyd pid $TALLYD_PID, $base_threads threads, $base_fds fds, GPU $base_gpu MiB used"

# ---- freed memory never reaches another tenant
tenant holder busy "$TMPD/runs/holder.out" &
holder=$!
sleep 1
tenant filler fill "$TMPD/runs/fill.out"
tenant reader fresh "$TMPD/runs/reader.out"
foreign=$(sed -n 's/^foreign_bytes=//p' "$TMPD/runs/reader.out")
if grep -qx ok "$TMPD/runs/reader.out"; then
  record PASS freed-memory-zeroed "foreign bytes in a fresh 256 MiB allocation: $foreign"
else
  record FAIL freed-memory-zeroed "foreign bytes: ${foreign:-?} ($(head -c 200 "$TMPD/runs/reader.out"))"
fi
kill -TERM "$holder" 2>/dev/null; wait "$holder" 2>/dev/null  # timeout(1) passes TERM on to the tenant
sleep 1

# ---- the rounds
read -r -a kinds <<<"${FAULT_KINDS:-assert illegal hang}"
declare -A native=([assert]=cudaErrorAssert [illegal]=cudaErrorIllegalAddress [hang]=cudaErrorLaunchTimeout)
for round in $(seq 1 "$ROUNDS"); do
  kind=${kinds[$(((round - 1) % ${#kinds[@]}))]}
  run=$TMPD/runs/r$round
  tenant "busy-a-$round" busy "$run.busy-a.out" & a=$!
  tenant "busy-b-$round" busy "$run.busy-b.out" & b=$!
  sleep 1.5
  tenant "faulty-$round" "$kind" "$run.faulty.out"
  faulted_at=$(now_ms)
  wait "$a" "$b"
  problems=""
  want=${native[$kind]}
  grep -qx "error=$want" "$run.faulty.out" && grep -qx "later=$want" "$run.faulty.out" ||
    problems+=" faulty: $(tr '\n' ' ' <"$run.faulty.out");"
  for who in busy-a busy-b; do
    grep -qx 'error=cudaErrorContextIsDestroyed' "$run.$who.out" && grep -qx 'later=cudaErrorContextIsDestroyed' "$run.$who.out" ||
      problems+=" $who: $(tr '\n' ' ' <"$run.$who.out");"
  done
  if first_good_tenant "r$round" >/dev/null; then
    recovery_ms=$(($(now_ms) - faulted_at))
  else
    problems+=" no tenant ran correctly within 30 s of the fault;"; recovery_ms=-1
  fi
  printf '{"round":%d,"kind":"%s","recovery_ms":%d,"ok":%s}\n' "$round" "$kind" "$recovery_ms" \
    "$([[ -z $problems ]] && echo true || echo false)" >>"$RESULTS"
  if [[ -z $problems ]]; then
    record PASS "round $round ($kind)" "faulty: $want, busy: cudaErrorContextIsDestroyed; next tenant correct ${recovery_ms} ms after the fault"
  else
    record FAIL "round $round ($kind)" "$problems"
  fi
done

# ---- a tenant that keeps faulting is refused for a while (fault_quarantine_after = 2)
for attempt in 1 2; do
  tenant repeat assert "$TMPD/runs/repeat-$attempt.out"
  first_good_tenant "repeat-$attempt" >/dev/null
done
tenant repeat fresh "$TMPD/runs/repeat-3.out"
if grep -q 'refused for another' "$TMPD/runs/repeat-3.out.err" && ! grep -qx ok "$TMPD/runs/repeat-3.out"; then
  record PASS quarantine "after 2 faults: $(grep -o "tenant repeat made.*" "$TMPD/runs/repeat-3.out.err" | head -n 1)"
else
  record FAIL quarantine "third run of tenant 'repeat' was not refused: $(tail -n 2 "$TMPD/runs/repeat-3.out.err" | tr '\n' ' ')"
fi
first_good_tenant after-quarantine >/dev/null || record FAIL quarantine "other tenants refused too"

# ---- nothing leaked: same process, same threads and descriptors, GPU memory back
first_good_tenant final >/dev/null
sleep 1
end_threads=$(threads_of "$TALLYD_PID"); end_fds=$(fds_of "$TALLYD_PID"); end_gpu=$(gpu_used_mib)
detail="pid $TALLYD_PID alive; threads $base_threads -> $end_threads; fds $base_fds -> $end_fds; GPU $base_gpu -> $end_gpu MiB"
if kill -0 "$TALLYD_PID" && [[ $end_threads -eq $base_threads && $end_fds -eq $base_fds ]] &&
   ((end_gpu - base_gpu <= 64 && base_gpu - end_gpu <= 64)); then
  record PASS no-leak "$detail"
else
  record FAIL no-leak "$detail"
fi
restarts=$(grep -c 'tallyd starts over' "$LOG")
echo "tallyd started over $restarts times; recovery ms: $(sed -n 's/.*"recovery_ms":\([-0-9]*\).*/\1/p' "$RESULTS" | sort -n | tr '\n' ' ')"
echo "$PASS_N passed, $FAIL_N failed"
[[ $FAIL_N -eq 0 ]]
