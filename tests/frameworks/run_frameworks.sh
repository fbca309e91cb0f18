#!/usr/bin/env bash
# Frameworks that carry their own CUDA runtime (CuPy, JAX) through tallyd:
#
#   tests/frameworks/run_frameworks.sh <build dir>
#
# For each framework installed (FRAMEWORKS="cupy jax"): first_steps.py natively (the reference),
# then through a private tallyd over a Unix socket with the client's GPU and libcuda hidden
# (when root), outputs compared line by line. One line per run: PASS/FAIL/SKIP <framework>
# <transport> <reason>. Outputs: <build>/tests/frameworks/results/.
# Exit: 0 all passed, 1 something failed, 77 nothing could run (no GPU, or no framework; why is printed).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../../scripts/tally_lib.sh
source "$HERE/../../scripts/tally_lib.sh"
[[ $# -eq 1 && -d $1 ]] || { echo "usage: $0 <build dir>" >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
PY=${FRAMEWORKS_PYTHON:-python3}
RES=$BUILD/tests/frameworks/results
rm -rf "$RES" && mkdir -p "$RES"
TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-frameworks.XXXXXX")
trap 'tl_stop_tallyd; rm -rf "$TMPD"' EXIT
reason=$(tl_gpu_skip_reason)
[[ -z $reason ]] || { echo "SKIP: no GPU visible ($reason)"; exit 77; }

FAILED=0 RAN=0
verdict() { echo "$1 $2 $3 $4"; [[ $1 == FAIL ]] && FAILED=1; return 0; }

tl_setup_hide "$TMPD" ""
[[ -n $TL_HIDE_NOTE ]] && echo "$TL_HIDE_NOTE"
tl_libcuda_dir "$BUILD/client/libtally_client.so" "$TMPD/libcuda"
tl_start_tallyd "$BUILD/server/tallyd" "$TMPD/t.sock" "$RES/tallyd.log" || { echo "FAIL tallyd did not start"; exit 1; }

for fw in ${FRAMEWORKS:-cupy jax}; do
  if ! env -u LD_PRELOAD "$PY" -c "import $fw" >/dev/null 2>&1; then
    verdict SKIP "$fw" native "$fw is not installed for $PY"
    continue
  fi
  RAN=1
  timeout -k 5 300 env -u LD_PRELOAD "$PY" "$HERE/first_steps.py" "$fw" >"$RES/$fw.native.out" 2>"$RES/$fw.native.err"
  rc=$?
  if [[ $rc -ne 0 ]]; then
    verdict FAIL "$fw" native "exit $rc natively: $(tail -n 1 "$RES/$fw.native.err")"
    continue
  fi
  tl_client_env "$BUILD/client/libtally_client.so" "unix:$TMPD/t.sock" "frameworks-$fw" best-effort "$TMPD/libcuda"
  cmd=(timeout -k 5 300)
  [[ $TL_HIDE -eq 1 ]] && cmd+=(unshare -m bash -c "$TL_HIDE_SCRIPT" bash "$TL_OLDDEV")
  "${cmd[@]}" env "${TL_CLIENT_ENV[@]}" "$PY" "$HERE/first_steps.py" "$fw" >"$RES/$fw.uds.out" 2>"$RES/$fw.uds.err"
  rc=$?
  if [[ $rc -ne 0 ]]; then
    verdict FAIL "$fw" uds "exit $rc through tallyd: $(grep -v '^\s*$' "$RES/$fw.uds.err" | tail -n 1 | cut -c1-300)"
  elif ! diff "$RES/$fw.native.out" "$RES/$fw.uds.out" >"$RES/$fw.diff"; then
    verdict FAIL "$fw" uds "output differs from the native run: $(head -n 4 "$RES/$fw.diff" | tr '\n' ' ')"
  else
    verdict PASS "$fw" uds "$(wc -l <"$RES/$fw.uds.out") lines as natively"
  fi
done
[[ $RAN -eq 1 ]] || { echo "SKIP: none of ${FRAMEWORKS:-cupy jax} is installed"; exit 77; }
exit $FAILED
