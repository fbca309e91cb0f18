#!/usr/bin/env bash
# The asynchronous launch rate, natively and through tallyd, in interleaved rounds (issue #8):
# native; UDS as a high-priority tenant (its launches made by tallyd's launch thread); the same on
# a second tallyd with --no-hp-launch-thread (the session thread makes them); TCP as HP. Each run
# is `tally_microbench launch_async --launch-batches 5 --launch-per-batch 100000`. The native rate
# drifts 15-25 % between runs on the H200's host, so every mode runs once per round and
# report.py compares each with native in the same round.
#
#   bench/launch_rate/run.sh <build dir> <out dir>
#
# Environment: LAUNCH_RATE_ROUNDS [5]. Writes rate-<mode>-<round>.json, tallyd-*.log and
# report.{md,json,png} to <out dir>. Exit: 0 done, 2 usage, 77 no GPU visible.
set -uo pipefail
[[ $# -eq 2 ]] || { sed -n '2,12p' "$0" >&2; exit 2; }
BUILD=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && OUT=$(cd "$2" && pwd) || exit 2
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH=$BUILD/bench/tally_microbench TALLYD=$BUILD/server/tallyd CLIENT=$BUILD/client/libtally_client.so
for f in "$BENCH" "$TALLYD" "$CLIENT"; do [[ -e $f ]] || { echo "run.sh: $f missing" >&2; exit 2; }; done
"$BENCH" probe >/dev/null 2>&1 || { echo "run.sh: no GPU visible; nothing run" >&2; exit 77; }
TMPD=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$TMPD"' EXIT
# HP over TCP is refused to anonymous clients unless allowed.
printf 'allow_anonymous_high_priority = true\nallow_plain_tcp = true\n' >"$TMPD/tallyd.toml"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_tallyd() {  # name port [extra args]
  local name=$1 p=$2; shift 2
  "$TALLYD" --config "$TMPD/tallyd.toml" --listen "unix:$TMPD/$name.sock" --listen "tcp://127.0.0.1:$p" \
    --admin "" --metrics "" "$@" >"$OUT/tallyd-$name.log" 2>&1 &
  for _ in $(seq 100); do [[ -S $TMPD/$name.sock ]] && return 0; sleep 0.1; done
  echo "run.sh: tallyd $name did not start" >&2
  exit 1
}
TCP_PORT=$(port)
start_tallyd thread "$TCP_PORT"
start_tallyd nothread "$(port)" --no-hp-launch-thread
ARGS=(launch_async --launch-batches 5 --launch-per-batch 100000)
client() { timeout 60 env LD_PRELOAD="$CLIENT" TALLY_PRIORITY=high TALLY_SERVER="$1" "$BENCH" "${ARGS[@]}"; }
for round in $(seq "${LAUNCH_RATE_ROUNDS:-5}"); do
  timeout 60 "$BENCH" "${ARGS[@]}" >"$OUT/rate-native-$round.json" 2>/dev/null
  client "unix:$TMPD/thread.sock" >"$OUT/rate-uds-hp-$round.json" 2>/dev/null
  client "unix:$TMPD/nothread.sock" >"$OUT/rate-uds-hp-nothread-$round.json" 2>/dev/null
  client "tcp://127.0.0.1:$TCP_PORT" >"$OUT/rate-tcp-hp-$round.json" 2>/dev/null
done
python3 "$SRC/bench/launch_rate/report.py" "$OUT" --markdown "$OUT/report.md" --json "$OUT/report.json" --plot "$OUT/report.png"
