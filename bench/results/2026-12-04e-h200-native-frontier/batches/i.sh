#!/usr/bin/env bash
# The overlapped reserve natively next to 30 and 75 µs blocks, with and without HP chaining its own
# kernels: does chaining help or hurt HP under an overlapped reserve?
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
B=.gpu/build
R=$OUT/i
mkdir -p $R
cp .gpu/commit.txt $R/
start=$SECONDS
bench/isolation/run.sh $B $R/frontier --pairs "small:short@75 small:short@30" --rho 0.2 \
  --systems "mps-prio green-split-0 green-split-0+pdl green-split-24-overlap green-split-24-overlap+pdl green-split-32-overlap green-split-32-overlap+pdl" \
  --repeats 2 --seconds 5 > $R/frontier.log 2>&1
echo "frontier rc=$? after $((SECONDS-start)) s"
python3 bench/isolation/report.py $R/frontier/runs.jsonl > $R/frontier/report.md 2>&1; grep "^| " $R/frontier/report.md | head -40
cd $OUT && tar czf i.tar.gz i && rm -rf i
