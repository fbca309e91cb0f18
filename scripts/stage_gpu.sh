#!/usr/bin/env bash
# Stages what the GPU machine needs into .gpu/ (ignored by git): a slim copy of the build
# tree (tallyd, the client, GPU test programs, benchmarks) and the non-system shared
# libraries they use, so they run on a host that has only the NVIDIA driver.
# Usage: scripts/stage_gpu.sh [BUILD_DIR]   then on the host:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
set -euo pipefail
BUILD=${1:-build}
OUTDIR=.gpu
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR/lib" "$OUTDIR/build/server" "$OUTDIR/build/client" "$OUTDIR/build/tests/gpu" "$OUTDIR/build/bench"
cp "$BUILD/server/tallyd" "$OUTDIR/build/server/"
cp "$BUILD/client/libtally_client.so" "$OUTDIR/build/client/"
ln -sf libtally_client.so "$OUTDIR/build/client/libcuda.so.1"
cp "$BUILD/client/libtally_cufft.so" "$OUTDIR/build/client/"
find "$BUILD/tests/gpu" -maxdepth 1 -type f -perm -u+x -name 'gpu_*' -exec cp {} "$OUTDIR/build/tests/gpu/" \;
for tool in tally_microbench implicit_sync_probe fault_probe coredump_probe green_ctx_probe small_read_probe launch_probe poll_contention_probe queue_sharing_probe socket_floor_probe health_probe_cost; do
  [[ -x $BUILD/bench/$tool ]] && cp "$BUILD/bench/$tool" "$OUTDIR/build/bench/"
done
mkdir -p "$OUTDIR/build/bench/isolation"
for tool in hp_infer be_train_ptx be_train_sass green_split; do
  [[ -x $BUILD/bench/isolation/$tool ]] && cp "$BUILD/bench/isolation/$tool" "$OUTDIR/build/bench/isolation/"
done
if [[ -x $BUILD/bench/netdelay/delay_proxy ]]; then
  mkdir -p "$OUTDIR/build/bench/netdelay" && cp "$BUILD/bench/netdelay/delay_proxy" "$OUTDIR/build/bench/netdelay/"
fi
if [[ -x $BUILD/bench/hp_request/hp_request ]]; then
  mkdir -p "$OUTDIR/build/bench/hp_request" && cp "$BUILD/bench/hp_request/hp_request" "$OUTDIR/build/bench/hp_request/"
fi
cp "$BUILD/server/tallyctl" "$OUTDIR/build/server/"
# The transform's GPU equivalence test and benchmark, with the corpus PTX it reads.
# (A partial build, e.g. only tallyd, the client and the benchmarks, is staged without them.)
if [[ -x $BUILD/tests/transform/tally_transform_gpu ]]; then
  mkdir -p "$OUTDIR/build/tests/transform/corpus"
  cp "$BUILD/tests/transform/tally_transform_gpu" "$OUTDIR/build/tests/transform/"
  cp "$BUILD"/tests/transform/corpus/*.ptx "$OUTDIR/build/tests/transform/corpus/"
fi
for bin in "$OUTDIR"/build/server/tallyd "$OUTDIR"/build/client/libtally_client.so "$OUTDIR"/build/tests/transform/tally_transform_gpu; do
  [[ -e $bin ]] || continue
  ldd "$bin" | awk '/=> \// {print $3}' | { grep -E 'capnp|kj|uv|spdlog|fmt|zstd|lz4|toml' || true; } | while read -r lib; do
    cp -L "$lib" "$OUTDIR/lib/"
  done
done
strip --strip-debug "$OUTDIR"/build/server/tallyd "$OUTDIR"/build/client/libtally_client.so "$OUTDIR"/lib/* 2>/dev/null || true
du -sh "$OUTDIR"
