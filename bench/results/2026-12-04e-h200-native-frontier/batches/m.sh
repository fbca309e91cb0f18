#!/usr/bin/env bash
# Long blocks again: tallyd's 40-SM reserve against the static 40-SM split next to 1 ms blocks,
# three repeats, per-request logs (where do tallyd's slow requests fall?).
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
B=.gpu/build
R=$OUT/m
mkdir -p $R
cp .gpu/commit.txt $R/
start=$SECONDS
ISOLATION_SERVICE_LOGS=1 timeout 190 bench/isolation/run.sh $B $R/long --pairs "small:long@1000" --rho 0.2 \
  --systems "green-split-40 tally-reserve-40" --repeats 3 --seconds 5 > $R/long.log 2>&1
echo "long rc=$? after $((SECONDS-start)) s"
python3 bench/isolation/report.py $R/long/runs.jsonl > $R/long/report.md 2>&1; grep "^| " $R/long/report.md | head -10
cd $OUT && tar czf m.tar.gz m && rm -rf m
