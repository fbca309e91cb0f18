#!/usr/bin/env bash
# The defaults choosing chaining online (new) against the defaults chaining whenever BE is about
# (old tallyd, same lease), without chaining, and MPS with priorities; 10 s runs so the choice settles.
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
B=.gpu/build
R=$OUT/j
mkdir -p $R
cp .gpu/commit.txt $R/
start=$SECONDS
PAIRS="small:short@10 small:short@30"
bench/isolation/run.sh $B $R/new --pairs "$PAIRS" --rho 0.2 \
  --systems "mps-prio tally-default tally-no-chain" --repeats 2 --seconds 10 > $R/new.log 2>&1
echo "new rc=$? after $((SECONDS-start)) s"
grep -h "chained is chosen\|HP unchained\|HP chained;" $R/new/tallyd.log | tail -30
python3 bench/isolation/report.py $R/new/runs.jsonl > $R/new/report.md 2>&1; grep "^| " $R/new/report.md | head -30
ISOLATION_TALLYD=.gpu/old/tallyd bench/isolation/run.sh $B $R/old --pairs "$PAIRS" --rho 0.2 \
  --systems "tally-default" --repeats 2 --seconds 10 > $R/old.log 2>&1
echo "old rc=$? after $((SECONDS-start)) s"
python3 bench/isolation/report.py $R/old/runs.jsonl > $R/old/report.md 2>&1; grep "^| " $R/old/report.md | head -30
cd $OUT && tar czf j.tar.gz j && rm -rf j
