#!/usr/bin/env bash
# The 150 µs pair's frontier, natively: does HP's stream priority hold across green contexts, and
# what does an overlapped reserve with HP chaining its own kernels give at each size? Then the
# long-block comparison (tallyd's reserve against the static split) if time is left.
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
B=.gpu/build
R=$OUT/h
mkdir -p $R
cp .gpu/commit.txt $R/
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $R/gpu.txt
start=$SECONDS
bench/isolation/run.sh $B $R/frontier --pairs "small:short@150" --rho 0.2 \
  --systems "mps-prio+pdl green-split-0 green-split-0+pdl green-split-0-overlap+pdl green-split-16-overlap+pdl green-split-32-overlap green-split-32-overlap+pdl green-split-48-overlap+pdl green-split-64-overlap+pdl green-split-48 green-split-64 tally-reserve-32-overlap tally-default" \
  --repeats 2 --seconds 5 > $R/frontier.log 2>&1
echo "frontier rc=$? after $((SECONDS-start)) s"
python3 bench/isolation/report.py $R/frontier/runs.jsonl > $R/frontier/report.md 2>&1; grep "^| " $R/frontier/report.md | head -40
if (( SECONDS - start < 300 )); then
  bench/isolation/run.sh $B $R/long --pairs "small:long@1000 small:long@10000" --rho 0.2 \
    --systems "mps-prio green-split-40 tally-reserve-40 tally-default" --repeats 2 --seconds 5 > $R/long.log 2>&1
  echo "long rc=$? after $((SECONDS-start)) s"
  python3 bench/isolation/report.py $R/long/runs.jsonl > $R/long/report.md 2>&1; grep "^| " $R/long/report.md | head -30
fi
cd $OUT && tar czf h.tar.gz h && rm -rf h
