#!/usr/bin/env bash
# What tallyd costs a best-effort training loop on its own (issue #9, "do no harm"): the isolation
# benchmark's BE program (bench/isolation/be_train_sass: every iteration ends in a stream
# synchronize) natively and through tallyd as a best-effort tenant over UDS, in interleaved
# rounds, for each BE shape. Extra tallyds (other settings, or another build's binaries) join the
# rounds as further systems.
#
#   bench/be_alone/run.sh <build dir> <out dir>
#
# Environment: BE_ALONE_SHAPES ["mem short"], BE_ALONE_ROUNDS [3], BE_ALONE_SECONDS [3],
#   BE_ALONE_SYSTEMS ["tally"]: names of tallyds to run, each "NAME" (this build, --policy
#   priority) or "NAME=TALLYD:CLIENT:ARGS" (those binaries and tallyd arguments), e.g.
#   "new old=/x/tallyd:/x/libtally_client.so:--policy_priority" (underscores become spaces).
# Writes be-alone.txt ("shape system round {be_train json}" per run), tallyd-*.log and
# report.{md,json,png} (bench/be_alone/report.py, which also takes --label NAME=TEXT).
# Exit: 0 done, 2 usage, 77 no GPU visible.
set -uo pipefail
[[ $# -eq 2 ]] || { sed -n '2,15p' "$0" >&2; exit 2; }
BUILD=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && OUT=$(cd "$2" && pwd) || exit 2
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BE=$BUILD/bench/isolation/be_train_sass
for f in "$BE" "$BUILD/server/tallyd" "$BUILD/client/libtally_client.so" "$BUILD/bench/tally_microbench"; do
  [[ -e $f ]] || { echo "run.sh: $f missing" >&2; exit 2; }
done
"$BUILD/bench/tally_microbench" probe >/dev/null 2>&1 || { echo "run.sh: no GPU visible; nothing run" >&2; exit 77; }
TMPD=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$TMPD"' EXIT
declare -A CLIENT_OF
NAMES=()
for spec in ${BE_ALONE_SYSTEMS:-tally}; do
  name=${spec%%=*} tallyd=$BUILD/server/tallyd client=$BUILD/client/libtally_client.so args="--policy priority"
  if [[ $spec == *=* ]]; then
    IFS=: read -r tallyd client args <<<"${spec#*=}"
    args=${args//_/ }
  fi
  # shellcheck disable=SC2086  # ARGS are words on purpose
  "$tallyd" --listen "unix:$TMPD/$name.sock" --admin "" --metrics "" $args >"$OUT/tallyd-$name.log" 2>&1 &
  for _ in $(seq 100); do [[ -S $TMPD/$name.sock ]] && break; sleep 0.1; done
  [[ -S $TMPD/$name.sock ]] || { echo "run.sh: tallyd $name did not start" >&2; exit 1; }
  CLIENT_OF[$name]=$client
  NAMES+=("$name")
done
: >"$OUT/be-alone.txt"
for shape in ${BE_ALONE_SHAPES:-mem short}; do
  # One calibration natively: every system then does exactly the same work per iteration.
  calibration=$("$BE" --shape "$shape" --seconds 1 2>/dev/null) || { echo "run.sh: no GPU visible" >&2; exit 77; }
  iterations=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["block_iterations"])' "$calibration")
  run=("$BE" --shape "$shape" --block-iterations "$iterations" --seconds "${BE_ALONE_SECONDS:-3}" --lead 0.5)
  for round in $(seq "${BE_ALONE_ROUNDS:-3}"); do
    echo "$shape native $round $("${run[@]}" 2>>"$OUT/clients.log")" >>"$OUT/be-alone.txt"
    for name in "${NAMES[@]}"; do
      result=$(env LD_PRELOAD="${CLIENT_OF[$name]}" TALLY_SERVER="unix:$TMPD/$name.sock" "${run[@]}" 2>>"$OUT/clients.log")
      echo "$shape $name $round $result" >>"$OUT/be-alone.txt"
    done
  done
done
python3 "$SRC/bench/be_alone/report.py" "$OUT/be-alone.txt" --markdown "$OUT/report.md" --json "$OUT/report.json" \
  --plot "$OUT/report.png"
