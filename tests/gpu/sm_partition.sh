#!/usr/bin/env bash
# SM partitions on a real GPU (issue #9): with `--policy priority --sm-partition 40`, a
# best-effort tenant alone runs on every SM; next to an active high-priority tenant its kernels
# stay off the HP partition's SMs, and the HP tenant's stay in it; both still compute correctly.
# With two reserve sizes and no online control, the larger one is used.
# Without partitions the same pair shares every SM. Clients run with the GPU hidden (when root).
#
#   tests/gpu/sm_partition.sh <build dir>        (OUT=<dir> keeps tallyd's log and the results)
# Exit: 0 all passed, 1 a check failed, 77 no GPU visible (skip).
set -uo pipefail
[[ $# -eq 1 && -d $1 ]] || { echo "usage: $0 <build dir>" >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CENSUS=$BUILD/tests/gpu/gpu_sm_census
HP_SMS=40
# shellcheck source=../../scripts/tally_lib.sh
source "$HERE/../../scripts/tally_lib.sh"

reason=$(tl_gpu_skip_reason)
[[ -z $reason ]] || { echo "SKIP: no GPU visible to tallyd ($reason)"; exit 77; }
TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tally-partition.XXXXXX")
SOCK=$TMPD/tallyd.sock
TALLYD_PID=""
FAILED=0
cleanup() {
  [[ -n $TALLYD_PID ]] && kill -TERM "$TALLYD_PID" 2>/dev/null && wait "$TALLYD_PID" 2>/dev/null
  if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT" && cp -f "$TMPD"/*.log "$TMPD"/*.json "$OUT/" 2>/dev/null; fi
  rm -rf "$TMPD"
}
trap cleanup EXIT
HIDE=()
if [[ $(id -u) -eq 0 ]] && unshare -m bash "$HERE/hide_gpu.sh" "$TMPD/olddev" true 2>/dev/null; then
  HIDE=(unshare -m bash "$HERE/hide_gpu.sh" "$TMPD/olddev")
else
  echo "note: clients see the GPU (not root, or no mount namespace)"
fi

start_tallyd() {
  [[ -n $TALLYD_PID ]] && kill -TERM "$TALLYD_PID" 2>/dev/null && wait "$TALLYD_PID" 2>/dev/null
  rm -f "$SOCK"
  "$BUILD/server/tallyd" --listen "unix:$SOCK" --admin "" --policy priority "$@" >>"$TMPD/tallyd.log" 2>&1 &
  TALLYD_PID=$!
  for _ in $(seq 1 100); do [[ -S $SOCK ]] && return 0; sleep 0.05; done
  echo "FAIL tallyd did not start"; tail -5 "$TMPD/tallyd.log"; exit 1
}
client() {  # priority out seconds skip
  env LD_PRELOAD="$BUILD/client/libtally_client.so" TALLY_SERVER="unix:$SOCK" TALLY_PRIORITY="$1" \
    "${HIDE[@]}" "$CENSUS" --seconds "$3" --skip "$4" >"$TMPD/$2.json" 2>>"$TMPD/clients.log"
}
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$TMPD/$1.json" "$2"; }
expect() {  # description condition
  if eval "$2"; then echo "PASS $1"; else echo "FAIL $1 ($2)"; FAILED=1; fi
}
# BE runs 0.3-2.3 s, HP 0-2.2 s; each counts SMs only once the other is surely active (a
# stream moves at its next call after the split begins).
pair() {  # prefix
  client high "$1-hp" 2.2 1.0 & local hp=$!
  sleep 0.3
  client best-effort "$1-be" 2 0.5
  wait "$hp"
}

start_tallyd --sm-partition "$HP_SMS"
client best-effort alone 1 0
ALL=$(field alone device_sms)
expect "best-effort alone uses every SM ($(field alone distinct_sms) of $ALL)" "[[ $(field alone distinct_sms) -eq $ALL ]]"
pair split
for role in hp be; do expect "$role results correct under the split" "[[ $(field split-$role correct) == True ]]"; done
expect "best-effort next to HP stays off the HP partition ($(field split-be distinct_sms) SMs)" \
  "[[ $(field split-be distinct_sms) -le $((ALL - HP_SMS)) ]]"
expect "HP next to best-effort stays in its partition ($(field split-hp distinct_sms) SMs)" \
  "[[ $(field split-hp distinct_sms) -le $((HP_SMS + 8)) ]]"
grep -q "SM partition level 1: HP" "$TMPD/tallyd.log" && echo "PASS tallyd logged its partitions" || { echo "FAIL no partition line in tallyd's log"; FAILED=1; }

# Several reserve sizes without online control: the largest is used.
start_tallyd --sm-partition "16,$HP_SMS"
pair levels
for role in hp be; do expect "$role results correct with two levels" "[[ $(field levels-$role correct) == True ]]"; done
expect "best-effort next to HP keeps off the larger reserve ($(field levels-be distinct_sms) SMs)" \
  "[[ $(field levels-be distinct_sms) -le $((ALL - HP_SMS)) ]]"
grep -q "SM partition level 2: HP" "$TMPD/tallyd.log" && echo "PASS tallyd made both levels" || { echo "FAIL no second level in tallyd's log"; FAILED=1; }

start_tallyd --sm-partition off
pair shared
expect "without partitions best-effort uses every SM ($(field shared-be distinct_sms))" "[[ $(field shared-be distinct_sms) -eq $ALL ]]"
[[ $FAILED -eq 0 ]] && echo "sm_partition: all passed" || echo "sm_partition: FAILED"
exit $FAILED
