#!/bin/bash
# A short native-vs-tallyd comparison that fits in a minute of GPU time: .item() round trip,
# a small MLP training step, ResNet-18 batch-1 inference (run as root on the GPU host; writes
# native.json and tally.json to $OUT). The full benchmark is bench/pytorch/run.sh.
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
CUDNN_DIR=$(dirname "$(find "$(python3 -c 'import site; print(site.getsitepackages()[0])')" -name 'libcudnn.so.9' | head -1)")
python3 bench/pytorch/quick_bench.py > $OUT/native.json 2>$OUT/native.err
SOCK=/tmp/tally-qb.sock; rm -f $SOCK
.gpu/build/server/tallyd --listen unix:$SOCK --library-dir $CUDNN_DIR > $OUT/tallyd.log 2>&1 & TP=$!; sleep 1.5
unshare -m bash tests/gpu/hide_gpu.sh /tmp/olddev env LD_PRELOAD=$PWD/.gpu/build/client/libtally_client.so \
  LD_LIBRARY_PATH=$PWD/.gpu/build/client:$PWD/.gpu/lib TALLY_SERVER=unix:$SOCK TALLY_PRIORITY=high \
  python3 bench/pytorch/quick_bench.py > $OUT/tally.json 2>$OUT/tally.err
kill $TP; wait $TP; cat $OUT/native.json $OUT/tally.json
