#!/usr/bin/env bash
# Demo: build Tally, start tallyd, run the bundled CUDA program through it, stop tallyd.
#
# Usage: scripts/demo.sh
#   1. scripts/install-deps.sh (a no-op when everything is installed; TALLY_SKIP_DEPS=1 skips it)
#   2. configure build/ (cmake -G Ninja) and build tallyd, libtally_client.so, gpu_vector_add
#   3. start tallyd on a Unix socket in a temporary directory and on a free 127.0.0.1 port
#   4. run build/tests/gpu/gpu_vector_add with LD_PRELOAD=libtally_client.so, once over the
#      Unix socket and once over TCP
#   5. stop tallyd (SIGTERM) and print its log
#   6. with a GPU: a short isolation pair (bench/isolation, 2 s per system: native, MPS-free
#      systems only) — an inference-like HP client next to a training-like BE client, natively
#      and through tallyd's priority policy — and print its table (TALLY_DEMO_ISOLATION=0 skips)
#
# Exit status: 0 the program ran on the GPU through tallyd over both transports;
#              3 no GPU is visible to tallyd (tallyd and the client worked, and refused cleanly);
#              1 something else failed.
# Every wait is bounded (tallyd start 10 s, each client run 120 s, tallyd stop 5 s).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

BUILD=build
NO_GPU_MSG='no GPU is visible to tallyd'
CLIENT_TIMEOUT=${TALLY_DEMO_TIMEOUT:-120}

step() { printf '\n==== %s\n' "$*"; }
die() { printf 'demo: FAILED: %s\n' "$*" >&2; exit 1; }

if [[ -z ${TALLY_SKIP_DEPS:-} ]]; then
  step "dependencies"
  scripts/install-deps.sh || die "could not install the dependencies"
fi

step "build ($BUILD/)"
generator=()
if [[ -f $BUILD/CMakeCache.txt ]]; then
  existing=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$BUILD/CMakeCache.txt")
  [[ $existing == Ninja ]] || die "$BUILD/ was configured with '$existing', not Ninja: remove $BUILD/ and rerun"
else
  generator=(-G Ninja)
fi
cmake -S . -B "$BUILD" "${generator[@]}" -DTALLY_BUILD_CUDA_PROGRAMS=ON || die "cmake configure failed"
cmake --build "$BUILD" -j "$(nproc)" --target tallyd tally_client gpu_vector_add hp_infer be_train_ptx be_train_sass ||
  die "build failed"

TALLYD=$PWD/$BUILD/server/tallyd
CLIENT=$PWD/$BUILD/client/libtally_client.so
PROGRAM=$PWD/$BUILD/tests/gpu/gpu_vector_add
for f in "$TALLYD" "$CLIENT" "$PROGRAM"; do [[ -e $f ]] || die "not built: $f"; done

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-demo.XXXXXX") || die "mktemp failed"
SOCK=$TMPD/tallyd.sock
LOG=$TMPD/tallyd.log
TALLYD_PID=""

now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

stop_tallyd() {
  [[ -n $TALLYD_PID ]] || return 0
  kill -TERM "$TALLYD_PID" 2>/dev/null
  local deadline=$(($(now_ms) + 5000))
  while kill -0 "$TALLYD_PID" 2>/dev/null && (($(now_ms) < deadline)); do sleep 0.05; done
  if kill -0 "$TALLYD_PID" 2>/dev/null; then
    echo "demo: tallyd did not stop within 5 s of SIGTERM; killing it" >&2
    kill -KILL "$TALLYD_PID" 2>/dev/null
  fi
  TALLYD_RC=0
  wait "$TALLYD_PID" 2>/dev/null || TALLYD_RC=$?
  TALLYD_PID=""
}
cleanup() {
  local rc=$?
  stop_tallyd
  rm -rf "$TMPD"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "start tallyd"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()') ||
  die "no free TCP port"
echo "+ tallyd --listen unix:$SOCK --listen tcp://127.0.0.1:$PORT"
"$TALLYD" --listen "unix:$SOCK" --listen "tcp://127.0.0.1:$PORT" >"$LOG" 2>&1 </dev/null &
TALLYD_PID=$!
deadline=$(($(now_ms) + 10000))
tcp_listening() {  # is something LISTENing on 127.0.0.1:$1?
  awk -v p=":$(printf '%04X' "$1")" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' /proc/net/tcp
}
until [[ -S $SOCK ]] && tcp_listening "$PORT"; do
  if ! kill -0 "$TALLYD_PID" 2>/dev/null; then
    TALLYD_PID=""
    sed 's/^/  tallyd| /' "$LOG"
    die "tallyd exited during startup"
  fi
  (($(now_ms) < deadline)) || { sed 's/^/  tallyd| /' "$LOG"; die "tallyd did not start within 10 s"; }
  sleep 0.05
done
sed 's/^/  tallyd| /' "$LOG"

declare -A RESULT=()
for transport in uds tcp; do
  if [[ $transport == uds ]]; then url=unix:$SOCK; else url=tcp://127.0.0.1:$PORT; fi
  step "gpu_vector_add through tallyd over ${transport^^}"
  echo "+ LD_PRELOAD=$CLIENT TALLY_SERVER=$url $PROGRAM"
  rc=0
  timeout -k 5 "$CLIENT_TIMEOUT" env LD_PRELOAD="$CLIENT" TALLY_SERVER="$url" TALLY_TENANT="demo-$transport" \
    "$PROGRAM" </dev/null 2>&1 | sed 's/^/  app| /'
  rc=${PIPESTATUS[0]}
  case $rc in
    0) echo "exit 0" ;;
    124 | 137) echo "timed out after ${CLIENT_TIMEOUT} s" ;;
    *) if ((rc >= 128)); then echo "CRASHED (signal $((rc - 128)))"; else echo "exit $rc"; fi ;;
  esac
  RESULT[$transport]=$rc
done

step "stop tallyd"
stop_tallyd
echo "tallyd exited ${TALLYD_RC:-?}"
echo "tallyd log:"
sed 's/^/  tallyd| /' "$LOG"

echo
if [[ ${RESULT[uds]} -eq 0 && ${RESULT[tcp]} -eq 0 ]]; then
  echo "demo: OK: gpu_vector_add ran on the GPU through tallyd over a Unix socket and over TCP"
  if [[ ${TALLY_DEMO_ISOLATION:-1} != 0 ]]; then
    step "isolation pair: HP inference-like client next to a BE training-like client (2 s per system)"
    bench/isolation/run.sh "$BUILD" "$TMPD/isolation" --seconds 2 --repeats 1 --pairs small:short \
      --systems "native tally-passthrough tally-priority" || die "the isolation pair failed"
    python3 bench/isolation/report.py "$TMPD/isolation/runs.jsonl"
  fi
  exit 0
fi
if grep -qF "$NO_GPU_MSG" "$LOG"; then
  clean=1
  for transport in uds tcp; do
    rc=${RESULT[$transport]}
    if ((rc == 0 || rc == 124 || rc == 137 || rc >= 128)); then clean=0; fi
  done
  ((clean)) || die "no GPU is visible to tallyd, and a client did not fail cleanly (exit codes: uds ${RESULT[uds]}, tcp ${RESULT[tcp]})"
  [[ ${TALLYD_RC:-1} -eq 0 ]] || die "no GPU is visible to tallyd, and tallyd did not stop cleanly (exit ${TALLYD_RC:-?})"
  echo "demo: no GPU is visible to tallyd on this machine. tallyd started, refused the client cleanly"
  echo "      over both transports and stopped; run scripts/demo.sh on a host with an NVIDIA GPU"
  echo "      and driver to see the program run. (exit 3)"
  exit 3
fi
die "gpu_vector_add failed through tallyd (exit codes: uds ${RESULT[uds]}, tcp ${RESULT[tcp]}); see the output above"
