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
#   HP_REQUEST_NETEM_US="50 200"     remote clients: also run over TCP from a network namespace
#                                    behind a veth pair with `tc netem` adding this delay each way
#                                    (modes netem50, netem200; root, ip and tc needed, else skipped
#                                    with the reason; private addresses only, nothing leaves the host)
#   HP_REQUEST_DELAY_US="0 50 200"    remote clients where netem is not available: over TCP through
#                                    bench/netdelay/delay_proxy on 127.0.0.1, which holds every byte
#                                    this long each way (modes delay0, delay50, ...; delay0 is the
#                                    proxy's own cost)
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

# Remote clients: a namespace "tallyhp" whose veth end 10.213.0.2 reaches tallyd on 10.213.0.1.
NETEM_DELAYS=${HP_REQUEST_NETEM_US:-}
NETEM_PORT=""
netem_down() { ip link del tallyhp0 2>/dev/null; ip netns del tallyhp 2>/dev/null; }
netem_up() {
  ip netns add tallyhp && ip link add tallyhp0 type veth peer name tallyhp1 && ip link set tallyhp1 netns tallyhp &&
    ip addr add 10.213.0.1/30 dev tallyhp0 && ip link set tallyhp0 up &&
    ip -n tallyhp addr add 10.213.0.2/30 dev tallyhp1 && ip -n tallyhp link set tallyhp1 up &&
    ip -n tallyhp link set lo up && tc qdisc add dev tallyhp0 root netem delay 1us &&
    ip netns exec tallyhp tc qdisc add dev tallyhp1 root netem delay 1us
}
if [[ -n $NETEM_DELAYS ]]; then
  why=""
  [[ $(id -u) -eq 0 ]] || why="not root"
  { command -v ip && command -v tc; } >/dev/null || why="${why:+$why, }ip/tc not found"
  if [[ -z $why ]]; then
    netem_down
    err=$(netem_up 2>&1) || { why="veth/netem setup failed: $err"; netem_down; }
  fi
  if [[ -n $why ]]; then
    echo "SKIP netem modes: $why"
  else
    NETEM_PORT=$(tl_free_port)
    TALLYD_EXTRA+=(--listen "tcp://10.213.0.1:$NETEM_PORT")
    trap 'tl_stop_tallyd; netem_down; rm -rf "$SCRATCH"' EXIT
    for d in $NETEM_DELAYS; do MODES+=" netem$d"; done
  fi
fi

DELAYS=${HP_REQUEST_DELAY_US:-}
PROXY=$BUILD/bench/netdelay/delay_proxy
if [[ -n $DELAYS ]]; then
  if [[ -x $PROXY ]]; then
    for d in $DELAYS; do MODES+=" delay$d"; done
  else
    echo "SKIP delay modes: $PROXY not built"
  fi
fi

if [[ $MODES == *uds* || $MODES == *tcp* || $MODES == *netem* || $MODES == *delay* ]]; then
  # The benchmark's client asks for high priority over TCP too, without a token; the netem
  # listener is on a private non-loopback address.
  printf 'allow_anonymous_high_priority = true\nallow_plain_tcp = true\n' >"$SCRATCH/tallyd.toml"
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
  elif [[ $mode == netem* ]]; then
    local delay=${mode#netem}
    tc qdisc change dev tallyhp0 root netem delay "${delay}us" &&
      ip netns exec tallyhp tc qdisc change dev tallyhp1 root netem delay "${delay}us" || return 1
    local hide=()
    [[ $TL_HIDE -eq 1 ]] && hide=(unshare -m bash -c "$TL_HIDE_SCRIPT" bash "$TL_OLDDEV")
    line=$(ip netns exec tallyhp "${hide[@]}" env "LD_PRELOAD=$CLIENT" "TALLY_SERVER=tcp://10.213.0.1:$NETEM_PORT" \
      TALLY_PRIORITY=high TALLY_TENANT=hp_request "${CLIENT_EXTRA[@]}" "$BENCH" "${args[@]}" 2>"$SCRATCH/err"); rc=$?
  elif [[ $mode == delay* ]]; then
    local port
    port=$(tl_free_port) || return 1
    "$PROXY" "$port" 127.0.0.1 "$TL_PORT" "${mode#delay}" >"$SCRATCH/proxy.out" 2>&1 &
    local proxy=$!
    for _ in $(seq 50); do grep -q listening "$SCRATCH/proxy.out" 2>/dev/null && break; sleep 0.1; done
    line=$(tl_hidden env "LD_PRELOAD=$CLIENT" "TALLY_SERVER=tcp://127.0.0.1:$port" TALLY_PRIORITY=high \
      TALLY_TENANT=hp_request "${CLIENT_EXTRA[@]}" "$BENCH" "${args[@]}" 2>"$SCRATCH/err"); rc=$?
    kill "$proxy" 2>/dev/null; wait "$proxy" 2>/dev/null
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
