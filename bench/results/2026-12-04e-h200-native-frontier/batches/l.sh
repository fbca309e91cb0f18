#!/usr/bin/env bash
# tallyd's overlapped 32-SM reserve with and without chained HP kernels against the same reserve
# natively, next to 75 and 150 µs blocks: does tallyd reach the native frontier?
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
B=.gpu/build
R=$OUT/l
mkdir -p $R
cp .gpu/commit.txt $R/
start=$SECONDS
timeout 330 bench/isolation/run.sh $B $R/reserve --pairs "small:short@150 small:short@75" --rho 0.2 \
  --systems "green-split-32-overlap green-split-32-overlap+pdl tally-reserve-32-overlap tally-reserve-32-overlap-nochain" \
  --repeats 2 --seconds 5 > $R/reserve.log 2>&1
echo "reserve rc=$? after $((SECONDS-start)) s"
python3 bench/isolation/report.py $R/reserve/runs.jsonl > $R/reserve/report.md 2>&1; grep "^| " $R/reserve/report.md | head -30
cd $OUT && tar czf l.tar.gz l && rm -rf l
