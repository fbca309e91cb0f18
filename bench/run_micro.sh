#!/usr/bin/env bash
# run_micro.sh: CUDA microbenchmarks, native vs. tallyd over UDS vs. tallyd over TCP,
# all in the same run.
#
# Usage:
#   bench/run_micro.sh <build dir> <out dir>
#
#   <build dir>  a CMake build of this repository with the CUDA programs enabled
#                (TALLY_BUILD_CUDA_PROGRAMS=ON, the default); it must contain
#                bench/tally_microbench, server/tallyd and client/libtally_client.so.
#   <out dir>    created if needed; receives
#                  micro.json   all results (format below)
#                  micro.log    stderr of every benchmark run, with headers
#                  tallyd.log   stdout/stderr of the tallyd started here
#
# Example (on the GPU machine):
#   cmake -S . -B build && cmake --build build -j
#   bench/run_micro.sh build bench/results/h200
#   python3 bench/report/make_report.py bench/results/h200/micro.json \
#       --markdown docs/benchmarks.md --plot bench/results/h200-bandwidth.png
#   (make_report.py needs only the standard library; without matplotlib it
#    skips the plot, which can then be made on another machine from micro.json.)
#
# What it does: starts its own tallyd listening on a fresh Unix socket in a
# temporary directory and on a free TCP port of 127.0.0.1, waits until both are
# listening, then for each benchmark (sync_rtt, launch_async, launch_sync,
# bandwidth) runs tally_microbench three times in a row: natively, then with
# LD_PRELOAD=<build>/client/libtally_client.so TALLY_SERVER=unix:<sock>, then
# with TALLY_SERVER=tcp://127.0.0.1:<port>. tallyd is stopped on exit (and
# restarted if it dies between runs). A run that fails or times out is recorded
# under "failures" and the others go on. Takes about 3-5 minutes; a global
# deadline skips what is left after TALLY_MICRO_DEADLINE_S.
#
# Exit status: 0 all runs succeeded; 1 some run failed (micro.json still
# written); 2 usage or missing files; 77 no GPU visible (nothing run).
#
# Environment knobs (all optional):
#   TALLY_MICRO_MODES       modes to run, default "native uds tcp"; also "tls" (tallyd with a
#                           self-signed certificate for localhost, made here with openssl)
#   TALLY_MICRO_BENCHES     default "sync_rtt launch_async launch_sync bandwidth"
#   TALLY_MICRO_ARGS        extra tally_microbench options for every run, e.g.
#                           "--bw-max-size 268435456" for a quicker sweep
#   TALLY_MICRO_TIMEOUT_S   limit per benchmark run, default 150
#   TALLY_MICRO_DEADLINE_S  total limit for all runs, default 340
#   TALLYD_ARGS             extra arguments for tallyd
#
# micro.json:
#   {"machine": {"gpu": "<nvidia-smi name, driver>", "hostname": ..., "cpu": ...,
#                "cpus": N, "kernel": ...},
#    "date": "2025-01-01T12:00:00Z", "duration_s": 212, "git": "<commit>|null",
#    "params": {"sync_rtt": "<options>", ..., "extra": "...", "timeout_s": 150},
#    "modes": ["native", "uds", "tcp"],
#    "tallyd": {"uds": "unix:...", "tcp": "tcp://127.0.0.1:PORT", "args": "", "starts": 1},
#    "results": [{"mode": "native|uds|tcp", "bench": ..., "size": bytes|null,
#                 "unit": ..., "median": x, "p10": x, "p90": x, "min": x, "max": x,
#                 "n": reps}, ...],
#    "failures": [{"mode": ..., "bench": ..., "rc": N, "reason": ..., "stderr_tail": [...]}]}
set -uo pipefail

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
}
[ $# -eq 2 ] || usage
case "$1" in -h | --help) usage ;; esac

die() {
  echo "run_micro.sh: $*" >&2
  exit 2
}

BUILD_DIR=$(cd "$1" 2>/dev/null && pwd) || die "build dir '$1' not found"
mkdir -p "$2" || die "cannot create out dir '$2'"
OUT_DIR=$(cd "$2" && pwd)
SRC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

BENCH="$BUILD_DIR/bench/tally_microbench"
TALLYD="$BUILD_DIR/server/tallyd"
CLIENT="$BUILD_DIR/client/libtally_client.so"

MODES=${TALLY_MICRO_MODES:-native uds tcp}
BENCHES=${TALLY_MICRO_BENCHES:-sync_rtt launch_async launch_sync bandwidth}
EXTRA_ARGS=${TALLY_MICRO_ARGS:-}
RUN_TIMEOUT=${TALLY_MICRO_TIMEOUT_S:-150}
DEADLINE=${TALLY_MICRO_DEADLINE_S:-340}
read -r -a TALLYD_EXTRA <<<"${TALLYD_ARGS:-}"

# Options per benchmark (tally_microbench's defaults, spelled out so that
# micro.json records them).
declare -A ARGS=(
  [sync_rtt]="--rtt-reps 20000 --rtt-warmup 1000 --rtt-max-s 30"
  [launch_async]="--launch-batches 10 --launch-per-batch 100000 --launch-max-s 20"
  [launch_sync]="--sync-reps 10000 --sync-warmup 200 --sync-max-s 3"
  [bandwidth]="--bw-budget-s 0.5 --bw-min-reps 3 --bw-max-reps 1000"
)

command -v python3 >/dev/null || die "python3 is needed (JSON assembly)"
command -v timeout >/dev/null || die "timeout (coreutils) is needed"
[ -x "$BENCH" ] || die "$BENCH not found: build with TALLY_BUILD_CUDA_PROGRAMS=ON"
for m in $MODES; do
  case "$m" in
    native) ;;
    uds | tcp | tls)
      [ -x "$TALLYD" ] || die "$TALLYD not found"
      [ -f "$CLIENT" ] || die "$CLIENT not found"
      ;;
    *) die "unknown mode '$m' in TALLY_MICRO_MODES" ;;
  esac
  [ "$m" != tls ] || command -v openssl >/dev/null || die "mode tls needs the openssl command (a test certificate)"
done
for b in $BENCHES; do
  [ -n "${ARGS[$b]+x}" ] || die "unknown benchmark '$b' in TALLY_MICRO_BENCHES"
done

# --- GPU present? -----------------------------------------------------------
probe_err=$(env -u LD_PRELOAD -u TALLY_SERVER "$BENCH" probe 2>&1)
probe_rc=$?
if [ $probe_rc -eq 77 ]; then
  echo "run_micro.sh: no GPU visible to CUDA ($probe_err); nothing run." >&2
  exit 77
elif [ $probe_rc -ne 0 ]; then
  echo "run_micro.sh: '$BENCH probe' failed (rc $probe_rc): $probe_err" >&2
  exit 2
fi

# --- scratch space, tallyd ----------------------------------------------------
TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tally-micro.XXXXXX") || die "mktemp failed"
SOCK="$TMP_DIR/tallyd.sock"
PORT=""
TALLYD_PID=""
TALLYD_STARTS=0
LOG="$OUT_DIR/micro.log"
TALLYD_LOG="$OUT_DIR/tallyd.log"
: >"$LOG"
: >"$TALLYD_LOG"

stop_tallyd() {  # tally_lib.sh's, on this script's pid variable
  TL_TALLYD_PID=$TALLYD_PID
  tl_stop_tallyd
  TALLYD_PID=""
}
CHILD_PID=""
cleanup() {
  if [ -n "$CHILD_PID" ] && kill -0 "$CHILD_PID" 2>/dev/null; then
    kill -TERM "$CHILD_PID" 2>/dev/null # timeout passes it on to the benchmark
    wait "$CHILD_PID" 2>/dev/null
  fi
  stop_tallyd
  rm -rf "$TMP_DIR"
}
trap cleanup EXIT
trap 'echo "run_micro.sh: interrupted" >&2; exit 130' INT TERM

# tl_free_port, tl_tcp_listening
# shellcheck source=../scripts/tally_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/tally_lib.sh"

# Mode tls: a self-signed certificate for localhost, made once per run.
TLS_PORT=""
tls_listener() {
  [[ " $MODES " == *" tls "* ]] || return 0
  if [ ! -f "$TMP_DIR/cert.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost \
      -keyout "$TMP_DIR/key.pem" -out "$TMP_DIR/cert.pem" >/dev/null 2>&1 || return 1
  fi
  TLS_PORT=$(tl_free_port) || return 1
  TLS_ARGS=(--tls-cert "$TMP_DIR/cert.pem" --tls-key "$TMP_DIR/key.pem" --listen "tls://127.0.0.1:$TLS_PORT")
}

start_tallyd() {
  rm -f "$SOCK"
  PORT=$(tl_free_port) || return 1
  TLS_ARGS=()
  tls_listener || { echo "run_micro.sh: no TLS certificate (openssl failed)" >&2; return 1; }
  TALLYD_STARTS=$((TALLYD_STARTS + 1))
  echo "=== $(date -u +%H:%M:%S) starting tallyd (#$TALLYD_STARTS) on unix:$SOCK and tcp://127.0.0.1:$PORT ${TLS_PORT:+and tls port $TLS_PORT}" >>"$TALLYD_LOG"
  env -u LD_PRELOAD -u TALLY_SERVER "$TALLYD" --listen "unix:$SOCK" --listen "tcp://127.0.0.1:$PORT" \
    "${TLS_ARGS[@]}" "${TALLYD_EXTRA[@]}" >>"$TALLYD_LOG" 2>&1 &
  TALLYD_PID=$!
  for _ in $(seq 300); do # up to 30 s
    if ! kill -0 "$TALLYD_PID" 2>/dev/null; then
      wait "$TALLYD_PID" 2>/dev/null
      echo "run_micro.sh: tallyd exited during start-up (rc $?); see $TALLYD_LOG" >&2
      TALLYD_PID=""
      return 1
    fi
    if [ -S "$SOCK" ] && tl_tcp_listening "$PORT" && { [ -z "$TLS_PORT" ] || tl_tcp_listening "$TLS_PORT"; }; then
      sleep 0.2 # let it get from bind/listen to accepting
      return 0
    fi
    sleep 0.1
  done
  echo "run_micro.sh: tallyd did not listen on both sockets within 30 s; see $TALLYD_LOG" >&2
  stop_tallyd
  return 1
}

ensure_tallyd() {
  if [ -n "$TALLYD_PID" ] && kill -0 "$TALLYD_PID" 2>/dev/null; then
    return 0
  fi
  if [ -n "$TALLYD_PID" ]; then
    wait "$TALLYD_PID" 2>/dev/null
    echo "run_micro.sh: tallyd died (rc $?); restarting it" >&2
    TALLYD_PID=""
  fi
  start_tallyd
}

# --- machine description --------------------------------------------------------
GPU_INFO=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | paste -sd ';' -)
[ -n "$GPU_INFO" ] || GPU_INFO="unknown (nvidia-smi unavailable)"
HOST_NAME=$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)
CPU_MODEL=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
[ -n "$CPU_MODEL" ] || CPU_MODEL=$(uname -m)
NCPU=$(nproc 2>/dev/null || echo 0)
KERNEL=$(uname -r)
GIT_REV=$(git -C "$SRC_DIR" rev-parse --verify -q HEAD 2>/dev/null || true)
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# --- runs ----------------------------------------------------------------------
RESULTS="$TMP_DIR/results.jsonl"     # one measurement per line, "mode" added
FAILURES="$TMP_DIR/failures.tsv"     # mode, bench, rc, reason, stderr file
: >"$RESULTS"
: >"$FAILURES"
START_S=$SECONDS
any_failed=0

if [[ " $MODES " == *" uds "* || " $MODES " == *" tcp "* || " $MODES " == *" tls "* ]]; then
  start_tallyd || echo "run_micro.sh: remote modes will be recorded as failures" >&2
fi

run_one() {
  local mode=$1 bench=$2
  local stdout="$TMP_DIR/$mode.$bench.out" stderr="$TMP_DIR/$mode.$bench.err"
  local left=$((DEADLINE - (SECONDS - START_S)))
  local limit=$RUN_TIMEOUT
  if [ $left -lt 5 ]; then
    printf '%s\t%s\t%s\t%s\t%s\n' "$mode" "$bench" "-1" "skipped: total deadline of ${DEADLINE}s reached" "" >>"$FAILURES"
    echo "run_micro.sh: $mode $bench skipped (deadline)" >&2
    return 1
  fi
  [ "$left" -lt "$limit" ] && limit=$left

  local -a envs=(-u LD_PRELOAD -u TALLY_SERVER)
  if [ "$mode" != native ]; then
    if ! ensure_tallyd; then
      printf '%s\t%s\t%s\t%s\t%s\n' "$mode" "$bench" "-1" "tallyd not running" "" >>"$FAILURES"
      return 1
    fi
    local server="unix:$SOCK"
    [ "$mode" = tcp ] && server="tcp://127.0.0.1:$PORT"
    [ "$mode" = tls ] && server="tls://localhost:$TLS_PORT"
    envs=(LD_PRELOAD="$CLIENT" TALLY_SERVER="$server")
    [ "$mode" = tls ] && envs+=(TALLY_CA="$TMP_DIR/cert.pem")
  fi

  local -a args
  read -r -a args <<<"${ARGS[$bench]} $EXTRA_ARGS"
  local t0=$SECONDS
  echo "run_micro.sh: $(date -u +%H:%M:%S) $bench [$mode]" >&2
  # timeout runs outside the preload; only the benchmark gets LD_PRELOAD.
  # It runs in the background and is waited for, so that a signal to this script
  # is handled at once (the trap stops it) rather than after it finishes.
  timeout -k 5 "$limit" env "${envs[@]}" "$BENCH" "$bench" "${args[@]}" >"$stdout" 2>"$stderr" &
  CHILD_PID=$!
  wait "$CHILD_PID"
  local rc=$?
  CHILD_PID=""
  {
    echo "===== $bench [$mode] rc=$rc $((SECONDS - t0))s: ${envs[*]} $BENCH $bench ${args[*]}"
    cat "$stderr"
  } >>"$LOG"
  # Keep what was measured even if a later part of the run failed.
  grep '^{' "$stdout" | sed "s/^{/{\"mode\": \"$mode\", /" >>"$RESULTS"
  if [ $rc -ne 0 ]; then
    local reason="exit status $rc"
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && reason="timed out after ${limit}s"
    printf '%s\t%s\t%s\t%s\t%s\n' "$mode" "$bench" "$rc" "$reason" "$stderr" >>"$FAILURES"
    echo "run_micro.sh: $bench [$mode] failed: $reason (see $LOG)" >&2
    return 1
  fi
  return 0
}

for bench in $BENCHES; do
  for mode in $MODES; do
    run_one "$mode" "$bench" || any_failed=1
  done
done
DURATION=$((SECONDS - START_S))
stop_tallyd

# --- assemble micro.json ---------------------------------------------------------
ARGS_JSON_INPUT=""
for b in $BENCHES; do ARGS_JSON_INPUT+="$b=${ARGS[$b]}"$'\n'; done

GPU_INFO="$GPU_INFO" HOST_NAME="$HOST_NAME" CPU_MODEL="$CPU_MODEL" NCPU="$NCPU" KERNEL="$KERNEL" \
  GIT_REV="$GIT_REV" DATE="$DATE" DURATION="$DURATION" EXTRA_ARGS="$EXTRA_ARGS" \
  RUN_TIMEOUT="$RUN_TIMEOUT" ARGS_JSON_INPUT="$ARGS_JSON_INPUT" SOCK="$SOCK" PORT="$PORT" \
  TALLYD_STARTS="$TALLYD_STARTS" TALLYD_ARGS="${TALLYD_ARGS:-}" MODES="$MODES" \
  python3 - "$RESULTS" "$FAILURES" "$OUT_DIR/micro.json" <<'PY'
import json, os, sys

results_path, failures_path, out_path = sys.argv[1:4]
env = os.environ
results = []
with open(results_path) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        try:
            results.append(json.loads(line))
        except ValueError:
            print("run_micro.sh: ignoring malformed line: " + line[:200], file=sys.stderr)
failures = []
with open(failures_path) as f:
    for line in f:
        mode, bench, rc, reason, err = line.rstrip("\n").split("\t")
        tail = []
        if err and os.path.exists(err):
            with open(err, errors="replace") as e:
                tail = [l.rstrip("\n") for l in e.readlines()[-8:]]
        failures.append({"mode": mode, "bench": bench, "rc": int(rc), "reason": reason,
                         "stderr_tail": tail})
params = {}
for line in env["ARGS_JSON_INPUT"].splitlines():
    if "=" in line:
        k, v = line.split("=", 1)
        params[k] = v
params["extra"] = env["EXTRA_ARGS"]
params["timeout_s"] = int(env["RUN_TIMEOUT"])
modes = env["MODES"].split()
doc = {
    "machine": {"gpu": env["GPU_INFO"], "hostname": env["HOST_NAME"], "cpu": env["CPU_MODEL"],
                "cpus": int(env["NCPU"] or 0), "kernel": env["KERNEL"]},
    "date": env["DATE"],
    "duration_s": int(env["DURATION"]),
    "git": env["GIT_REV"] or None,
    "modes": modes,
    "params": params,
    "tallyd": ({"uds": "unix:" + env["SOCK"], "tcp": "tcp://127.0.0.1:" + env["PORT"],
                "args": env["TALLYD_ARGS"], "starts": int(env["TALLYD_STARTS"])}
               if any(m != "native" for m in modes) else None),
    "results": results,
    "failures": failures,
}
tmp = out_path + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
os.replace(tmp, out_path)
print("run_micro.sh: wrote %s (%d measurements, %d failures)" % (out_path, len(results), len(failures)),
      file=sys.stderr)
PY
py_rc=$?
[ $py_rc -eq 0 ] || die "could not write micro.json"
echo "run_micro.sh: done in ${DURATION}s; logs: $LOG, $TALLYD_LOG" >&2
exit $any_failed
