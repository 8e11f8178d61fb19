#!/bin/bash
# Not yet run: the dot4 matvecs without wgpu's index clamps (IndexChecks::Kernel, this
# folder's README) against the same binary with every kernel clamped
# (BRASS_INDEX_CHECKS=wgpu), decode alternated twice, on two small synthetic shapes (their
# decode is where llama.cpp is closest: fixed per-token costs) and the 8B.
# Binaries: compare (stripped, xz'd) in .bin/$BIN; carry [.gl, .anchors, .bin/$BIN].
set -u
BIN=${BIN:-mv}
source results/lease_setup.sh
unpack_bin "$BIN" "/tmp/sets/$BIN"
start_llama_build
for shape in smollm2-135m llama3.2-1b llama3-8b; do
    for c in kernel wgpu kernel wgpu; do
        BRASS_INDEX_CHECKS=$c timeout 100 "/tmp/sets/$BIN/compare" --synthetic $shape \
            --skip-matvec --pp 512 -n 128 2>&1 | grep -E "prompt of|decode at" |
            sed "s/^/$shape checks=$c /" | tee -a "$OUT/decode.log" | cut -c1-150
    done
done
llama_bench_synthetic "$OUT/llama.log"
