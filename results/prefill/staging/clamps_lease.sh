#!/bin/bash
# The next H200 lease for the matrix-unit matmuls (issue 41): do wgpu's index clamps keep
# the driver from its fast matrix loads? wgpu's translation clamps every dynamic index
# into a fixed-size array, the workgroup tiles that `coopLoad` reads included (an
# OpExtInst UMin on each load's index, README.md), which hides the index's alignment;
# BRASS_SPIRV_PASSTHROUGH=1 hands the driver naga's SPIR-V without the clamps. Same
# binaries both ways, alternated. Run from the checkout's root with carry [.gl, .bin/$BIN]
# (compare, matmul_bench, matmul_test, prefill_test, engine_test: stripped, xz'd).
set -u
BIN=${BIN:-clamps}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=${BRASS_CACHE:-/tmp/bc} BRASS_ADAPTER=NVIDIA
mkdir -p /work && ln -sfn "$PWD" /work/main
for f in .bin/"$BIN"/*.xz; do
    t="/tmp/$(basename "$f" .xz)"; [ -x "$t" ] || { xz -dc "$f" >"$t"; chmod +x "$t"; }
done
(timeout 200 /tmp/compare --synthetic llama3-8b --skip-matvec --pp 64 -n 1 >/dev/null 2>&1 &)
skip="--skip default_model --skip prompt_logits_leave_the_greedy_tokens_unchanged"
for t in matmul_test prefill_test engine_test; do
    BRASS_SPIRV_PASSTHROUGH=1 timeout 200 "/tmp/$t" $skip >"$OUT/${t}_passthrough.log" 2>&1
    echo "$t (passthrough) exited $?" | tee -a "$OUT/${t}_passthrough.log"
done
for p in 0 1 0 1; do
    BRASS_SPIRV_PASSTHROUGH=$p timeout 120 /tmp/matmul_bench --shapes llama3-8b --types q4_k,q6_k \
        --kernels dot4 --matrices attn_q,attn_k,ffn_up,ffn_down --tokens 512,2048 --unpacked none \
        --columns 2:2:4 --iters 5 2>&1 | grep -E "coopmat|columns" |
        sed "s/^/passthrough=$p /" | tee -a "$OUT/matmul_bench.log" | cut -c1-170
done
for p in 0 1 0 1; do
    BRASS_SPIRV_PASSTHROUGH=$p timeout 90 /tmp/compare --synthetic llama3-8b --skip-matvec \
        --pp 512,2048 -n 32 2>&1 | grep -E "prompt of|decode at" |
        sed "s/^/passthrough=$p /" | tee -a "$OUT/pp.log" | cut -c1-170
done
for p in 0 1; do
    BRASS_SPIRV_PASSTHROUGH=$p timeout 150 /tmp/compare --synthetic llama3-8b --skip-matvec --pp 0 \
        -n 128 --parallel 1,8,32 --parallel-prompt 128 >"$OUT/parallel_$p.log" 2>&1
    grep -E "sequences:" "$OUT/parallel_$p.log" | cut -c1-170 | sed "s/^/passthrough=$p /"
done
