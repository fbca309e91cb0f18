#!/usr/bin/env bash
# The HP-request benchmark (issue #8): short open-loop inference-like requests (bench/hp_request/
# hp_request.cu) natively and through a private tallyd over UDS and TCP, in one run, the client's
# GPU hidden when root. Writes results.jsonl (one line per run), report.{json,md,png} and
# tallyd.log to the out dir.
#
#   bench/hp_request/run.sh <build dir> <out dir>
#
# Environment knobs:
#   HP_REQUEST_WORK_US="50 200 2000"  GPU time per request (us)
#   HP_REQUEST_MODES="native uds tcp"
#   HP_REQUEST_SECONDS=4              per run
#   HP_REQUEST_REPEATS=1              rounds over every (work, mode), interleaved
#   HP_REQUEST_TALLYD_ARGS=""         extra tallyd options
#   HP_REQUEST_CLIENT_ENV=""          extra client variables, e.g. "TALLY_TRACE=/tmp/t.tsv"
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/tally_lib.sh
source "$HERE/../../scripts/tally_lib.sh"
[[ $# -eq 2 && -d $1 ]] || { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
mkdir -p "$2" && OUT=$(cd "$2" && pwd)
BENCH=$BUILD/bench/hp_request/hp_request
CLIENT=$BUILD/client/libtally_client.so
[[ -x $BENCH ]] || { echo "$BENCH not built" >&2; exit 2; }
reason=$(tl_gpu_skip_reason)
[[ -z $reason ]] || { echo "SKIP: $reason"; exit 77; }

WORKS=${HP_REQUEST_WORK_US:-50 200 2000}
MODES=${HP_REQUEST_MODES:-native uds tcp}
SECONDS_PER_RUN=${HP_REQUEST_SECONDS:-4}
REPEATS=${HP_REQUEST_REPEATS:-1}
read -r -a TALLYD_EXTRA <<<"${HP_REQUEST_TALLYD_ARGS:-}"
read -r -a CLIENT_EXTRA <<<"${HP_REQUEST_CLIENT_ENV:-}"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/tally-hpreq.XXXXXX")
trap 'tl_stop_tallyd; rm -rf "$SCRATCH"' EXIT
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

if [[ $MODES == *uds* || $MODES == *tcp* ]]; then
  # The benchmark's client asks for high priority over TCP too, without a token.
  echo 'allow_anonymous_high_priority = true' >"$SCRATCH/tallyd.toml"
  tl_start_tallyd "$BUILD/server/tallyd" "$SCRATCH/tallyd.sock" "$OUT/tallyd.log" --config "$SCRATCH/tallyd.toml" \
    "${TALLYD_EXTRA[@]}" || exit 1
  tl_setup_hide "$SCRATCH" ""
  [[ -n $TL_HIDE_NOTE ]] && echo "$TL_HIDE_NOTE"
fi

run_one() {  # <mode> <work us> <repeat>
  local mode=$1 work=$2 rep=$3 line rc server
  local args=(--work-us "$work" --seconds "$SECONDS_PER_RUN" --seed "$rep")
  if [[ $mode == native ]]; then
    line=$(env -u LD_PRELOAD -u TALLY_SERVER "$BENCH" "${args[@]}" 2>"$SCRATCH/err"); rc=$?
  else
    server="unix:$SCRATCH/tallyd.sock"
    [[ $mode == tcp ]] && server="tcp://127.0.0.1:$TL_PORT"
    line=$(tl_hidden env "LD_PRELOAD=$CLIENT" "TALLY_SERVER=$server" TALLY_PRIORITY=high TALLY_TENANT=hp_request \
      "${CLIENT_EXTRA[@]}" "$BENCH" "${args[@]}" 2>"$SCRATCH/err"); rc=$?
  fi
  if [[ $rc -ne 0 || -z $line ]]; then
    echo "FAIL $mode work=${work}us: rc $rc $(tail -n 2 "$SCRATCH/err" | tr '\n' ' ')"
    return 1
  fi
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(mode=sys.argv[2], repeat=int(sys.argv[3])); print(json.dumps(d))' \
    "$line" "$mode" "$rep" >>"$RESULTS"
  echo "$mode work=${work}us: $line"
}

failed=0
for rep in $(seq 1 "$REPEATS"); do
  for work in $WORKS; do
    for mode in $MODES; do run_one "$mode" "$work" "$rep" || failed=1; done
  done
done
python3 "$HERE/report.py" "$RESULTS" --out "$OUT/report" || failed=1
exit $failed
