#!/usr/bin/env bash
# Soak (issue #5): many tenants run GPU suite programs against one tallyd for a while, some
# killed with SIGKILL at random moments (mid-kernel, mid-copy, mid-handshake, mid-preemption);
# afterwards tallyd must hold no tenant and be back at its idle GPU memory, threads and file
# descriptors. Writes a JSON summary (stdout and $OUT/soak.json when OUT is set).
#
#   tests/gpu/soak.sh BUILD_DIR [--seconds S] [--tenants N] [--kill-percent P]
#     [--programs "a b ..."]   (default: the programs below)
#     defaults: 600 s, 32 tenants, 30 % of the runs killed at a random time in 0–2 s
# Tenants alternate high priority and best effort under --policy priority. Left out: programs
# whose kernel waits for its own later call (host_threads: docs/scheduler.md) and kernel_printf
# (its output goes to tallyd). Exit: 0 clean, 1 something leaked or a completed run failed,
# 77 no GPU visible.
set -uo pipefail
[[ $# -ge 1 ]] || { sed -n 2,12p "$0"; exit 2; }
BUILD=$(cd "$1" && pwd); shift
SECONDS_TOTAL=600 TENANTS=32 KILL_PERCENT=30
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) SECONDS_TOTAL=$2; shift 2 ;;
    --tenants) TENANTS=$2; shift 2 ;;
    --kill-percent) KILL_PERCENT=$2; shift 2 ;;
    --programs) read -ra ONLY <<<"$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -e /dev/nvidia0 ]] || { echo "SKIP: no GPU visible (no /dev/nvidia0)"; exit 77; }
PROGRAMS=(vector_add reduction_atomics grids_2d_3d dynamic_smem templates_structs symbols streams_events
          pinned_async driver_ptx error_cases memcpy_2d host_callbacks coop_launch_ex large_transfers warp_ops)
[[ -n ${ONLY:-} ]] && PROGRAMS=("${ONLY[@]}")
WORK=$(mktemp -d /tmp/tally-soak.XXXXXX)
mkdir -p "$WORK/failed"
SOCK=$WORK/tallyd.sock ADMIN=$WORK/admin.sock

"$BUILD/server/tallyd" --listen "unix:$SOCK" --admin "unix:$ADMIN" --policy priority --cache-dir "$WORK/cache" \
  >"$WORK/tallyd.log" 2>&1 &
TALLYD=$!
trap 'kill $TALLYD 2>/dev/null; timeout 10 tail --pid=$TALLYD -f /dev/null || kill -KILL $TALLYD 2>/dev/null' EXIT
for _ in $(seq 1 100); do [[ -S $SOCK ]] && break; sleep 0.05; done

# What tallyd holds when no tenant is connected, measured after the warm-up below so that lazily
# made state — completion threads, staging buffers, module caches — is part of "idle".
gpu_mib() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p="$TALLYD" '$1==p {print $2}'; }
threads() { ls "/proc/$TALLYD/task" | wc -l; }
fds() { ls "/proc/$TALLYD/fd" | wc -l; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$TALLYD/status"; }
# Every program runs once first, as each priority class: the driver grows some context memory
# lazily and keeps it (local memory for the largest per-thread stack seen, module code), which
# is not a tenant's leak; a leak grows with the runs after this.
for prog in "${PROGRAMS[@]}"; do
  for priority in high best-effort; do
    env LD_PRELOAD="$BUILD/client/libtally_client.so" TALLY_SERVER="unix:$SOCK" TALLY_TENANT=warmup \
      TALLY_PRIORITY=$priority timeout 60 "$BUILD/tests/gpu/gpu_$prog" >/dev/null 2>&1
  done
done

# A failed run whose only wrong answers were "this kernel is still running" checks (a 300 ms
# kernel queried right after its launch): its calls were held that long by other tenants'
# driver calls (docs/security.md, "Tenants that die"). Counted apart, still counted.
still_running_checks_only() {
  grep -q 'MISMATCH: expected cudaErrorNotReady' "$1" &&
    ! grep -v 'MISMATCH: expected cudaErrorNotReady' "$1" | grep -qE 'MISMATCH|FAILED$|FATAL'
}

tenant_loop() {  # tenant_loop INDEX DEADLINE KILL_PERCENT: runs programs until the deadline; one line per run
  local i=$1 deadline=$2 kill_percent=$3 priority=best-effort
  (( i % 2 == 0 )) && priority=high
  RANDOM=$((i * 7919 + 1))
  while (( $(date +%s) < deadline )); do
    local prog=${PROGRAMS[RANDOM % ${#PROGRAMS[@]}]}
    # timeout leads its own process group (its pid is $!): killing the group kills the client.
    env LD_PRELOAD="$BUILD/client/libtally_client.so" TALLY_SERVER="unix:$SOCK" TALLY_TENANT="soak-$i" \
      TALLY_PRIORITY="$priority" timeout -s KILL 120 "$BUILD/tests/gpu/gpu_$prog" >"$WORK/run-$i.out" 2>&1 &
    local pid=$! outcome
    if (( RANDOM % 100 < kill_percent )); then
      sleep "$((RANDOM % 2)).$((RANDOM % 10))$((RANDOM % 10))"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null; outcome=killed
    else
      if wait "$pid"; then outcome=passed; else
        outcome="failed:$?"
        still_running_checks_only "$WORK/run-$i.out" && outcome+=":still-running-checks"
        # The first failures of each program are kept, to see why (soak-failures.tgz).
        (( $(ls "$WORK/failed" | grep -c "^$prog-") < 5 )) && cp "$WORK/run-$i.out" "$WORK/failed/$prog-$priority-$i-$RANDOM.out"
      fi
    fi
    echo "$prog $priority $outcome"
  done
}
# Then all tenants at once for a while, nobody killed: the driver sizes some context memory for
# the most streams and kernels it has seen at once and keeps it. A leak keeps growing after
# this (gpu_mib.series in the summary samples it every 30 s).
WARM_DEADLINE=$(( $(date +%s) + 20 ))
for i in $(seq 1 "$TENANTS"); do tenant_loop "$i" "$WARM_DEADLINE" 0 >"$WORK/warmup-$i.log" & done
wait $(jobs -p | grep -v "^$TALLYD$") 2>/dev/null
sleep 3
IDLE_GPU=$(gpu_mib) IDLE_THREADS=$(threads) IDLE_FDS=$(fds) IDLE_RSS=$(rss_kib)

DEADLINE=$(( $(date +%s) + SECONDS_TOTAL ))
for i in $(seq 1 "$TENANTS"); do tenant_loop "$i" "$DEADLINE" "$KILL_PERCENT" >"$WORK/tenant-$i.log" & done
PEAK_TENANTS=0 SERIES="" NEXT_SAMPLE=0
while (( $(date +%s) < DEADLINE )); do
  n=$("$BUILD/server/tallyctl" --socket "$ADMIN" status 2>/dev/null | awk '/^tenants/ {print $2}')
  (( ${n:-0} > PEAK_TENANTS )) && PEAK_TENANTS=$n
  if (( $(date +%s) >= NEXT_SAMPLE )); then
    SERIES+="${SERIES:+,}$(gpu_mib)"; NEXT_SAMPLE=$(( $(date +%s) + 30 ))
  fi
  sleep 2
done
wait $(jobs -p | grep -v "^$TALLYD$") 2>/dev/null
sleep 3  # releases of the last tenants finish
AFTER_GPU=$(gpu_mib) AFTER_THREADS=$(threads) AFTER_FDS=$(fds) AFTER_RSS=$(rss_kib)
LEFT=$("$BUILD/server/tallyctl" --socket "$ADMIN" status | awk '/^tenants/ {print $2}')
cat "$WORK"/tenant-*.log >"$WORK/runs.txt"
RUNS=$(wc -l <"$WORK/runs.txt") KILLED=$(grep -c ' killed$' "$WORK/runs.txt") PASSED=$(grep -c ' passed$' "$WORK/runs.txt")
FAILED=$(grep -c ' failed:' "$WORK/runs.txt") FAILED_STILL_RUNNING=$(grep -c ':still-running-checks$' "$WORK/runs.txt")
WARM_RUNS=$(cat "$WORK"/warmup-*.log | wc -l) WARM_FAILED=$(cat "$WORK"/warmup-*.log | grep -c ' failed:')
ALIVE=0; kill -0 "$TALLYD" 2>/dev/null && ALIVE=1
SUMMARY=$(printf '{"seconds":%s,"tenants":%s,"kill_percent":%s,"warmup":{"runs":%s,"failed":%s},"runs":%s,"passed":%s,"killed":%s,"failed":%s,"failed_only_still_running_checks":%s,"peak_connected":%s,"tenants_left":%s,"tallyd_alive":%s,"gpu_mib":{"idle":%s,"after":%s,"series":[%s]},"threads":{"idle":%s,"after":%s},"fds":{"idle":%s,"after":%s},"rss_kib":{"idle":%s,"after":%s}}' \
  "$SECONDS_TOTAL" "$TENANTS" "$KILL_PERCENT" "$WARM_RUNS" "$WARM_FAILED" "$RUNS" "$PASSED" "$KILLED" "$FAILED" "$FAILED_STILL_RUNNING" "$PEAK_TENANTS" "${LEFT:-null}" "$ALIVE" \
  "${IDLE_GPU:-null}" "${AFTER_GPU:-null}" "$SERIES" "$IDLE_THREADS" "$AFTER_THREADS" "$IDLE_FDS" "$AFTER_FDS" "$IDLE_RSS" "$AFTER_RSS")
echo "$SUMMARY"
grep ' failed:' "$WORK/runs.txt" | sort | uniq -c | head -20
grep ' failed:' "$WORK"/warmup-*.log | cut -d: -f2- | sort | uniq -c | sed 's/^/warm-up: /' | head
if [[ -n ${OUT:-} ]]; then
  echo "$SUMMARY" >"$OUT/soak.json"
  tail -200 "$WORK/tallyd.log" >"$OUT/soak-tallyd.log"
  cp "$WORK/runs.txt" "$OUT/soak-runs.txt"
  gzip -c "$WORK/tallyd.log" >"$OUT/soak-tallyd-full.log.gz"
  tar -C "$WORK" -czf "$OUT/soak-failures.tgz" failed
fi
[[ $ALIVE == 1 && ${LEFT:-1} == 0 && $FAILED == 0 && ${AFTER_GPU:-x} == "${IDLE_GPU:-y}" && $AFTER_THREADS == "$IDLE_THREADS" && $AFTER_FDS == "$IDLE_FDS" ]]
