#!/usr/bin/env bash
# run_transform.sh: the kernel-variant benchmark (issue #3) on the GPU machine.
#
#   bench/run_transform.sh <build dir> <out dir>
#
# Runs tally_transform_gpu --bench over the sm_90 corpus: every eligible kernel at 64x the
# equivalence test's grid, original vs sliced x4 vs PTB (one wave of workers, chunk 1 and the
# fastest of 4/16/64), each the median of 20 CUDA-event timings after 3 warm-ups, plus the
# retreat latency (flag raised by a memset on a high-priority stream -> stream idle) over 30
# trials at random moments. Writes <out dir>/transform.json; then, on any machine:
#   python3 bench/report/transform_report.py <out dir>/transform.json --markdown docs/benchmarks.md \
#       --plot bench/results/<date>-<gpu>-transform.png
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 <build dir> <out dir>" >&2; exit 2; }
BUILD=$1
OUTDIR=$2
mkdir -p "$OUTDIR"
CORPUS=$BUILD/tests/transform/corpus
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >"$OUTDIR/gpu.txt" 2>&1 || true
"$BUILD/tests/transform/tally_transform_gpu" --bench --json "$OUTDIR/transform.json" \
  "$CORPUS/grids_sm90.ptx" "$CORPUS/sync_sm90.ptx" "$CORPUS/ineligible_sm90.ptx" "$CORPUS/cluster_sm90.ptx" \
  >"$OUTDIR/transform.log" 2>&1
echo "wrote $OUTDIR/transform.json"
