#!/usr/bin/env bash
# The GPU suites on this commit: HP clients, then HP + BE pairs (clients' GPU and libcuda hidden).
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
B=.gpu/build
R=$OUT/k
mkdir -p $R
cp .gpu/commit.txt $R/
start=$SECONDS
printf 'allow_anonymous_high_priority = true\nallow_plain_tcp = true\n' > /tmp/hp.toml
GPU_SUITE_CLIENT_PRIORITY=high GPU_SUITE_TALLYD_ARGS="--config /tmp/hp.toml --policy priority --hp-chain always --transform stress" \
  timeout 250 tests/gpu/run_suite.sh $B > $R/suite-hp.txt 2>&1; echo "rc=$? after $((SECONDS-start)) s" >> $R/suite-hp.txt
grep -h "HP launches chained" $OUT/tallyd.log | tail -1 > $R/tallyd-summary-hp.txt
tail -n 2 $R/suite-hp.txt
GPU_SUITE_PRIORITY_PAIR=1 GPU_SUITE_TALLYD_ARGS="--policy priority --hp-chain always --transform stress" \
  timeout $((520 - (SECONDS-start))) tests/gpu/run_suite.sh $B > $R/suite-pairs.txt 2>&1; echo "rc=$? after $((SECONDS-start)) s" >> $R/suite-pairs.txt
grep -h "HP launches chained" $OUT/tallyd.log | tail -1 > $R/tallyd-summary-pairs.txt
tail -n 2 $R/suite-pairs.txt
grep -h "^FAIL" $R/suite-hp.txt $R/suite-pairs.txt
for f in $B/suite_results/*.diff; do [[ -e $f ]] && cp "$f" $R/; done
cd $OUT && tar czf k.tar.gz k && rm -rf k
