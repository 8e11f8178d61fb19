#!/bin/bash
# Issue 42, call 1 of 2 on one warm machine: the decode columns' wide tile with each
# subgroup taking two row blocks of one part (`rp`: a round's x matrices loaded once for
# both) against one row block's two parts (`base`, main), the same bits; and `rot`,
# rp with BRASS_COLUMNS_ROTATE=1 (an experiment's switch: each row tile walks its span's
# rounds from a round of its own, so that the workgroups in flight read different x
# groups; other bits than the narrow tile's). `rp` runs with --decode-column-spans 2
# (every matrix in two spans, as base); `one` is the same binary under its plan's rule,
# the matrices whose narrow tile fills the device (gate and up, the head) in one span.
# llama.cpp's CUDA and Vulkan libraries build in the background for lease2.sh.
# Carry .gl .anchors .bin/base .bin/rp, built by results/parallel/vec4_staging/build_set.sh:
# base from main, rp from main with this folder's row_pairs.patch, rotate_rounds.patch and
# one_span.patch applied (git apply, in that order; then `cargo run --release --example
# spirv`).
source results/lease_setup.sh
start_llama_library_build cuda
start_llama_library_build vulkan
for s in base rp; do unpack_bin $s /tmp/$s; done
start_synth /tmp/rp/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
{ timeout 100 /tmp/rp/matmul_test decode_columns every_coop_matrix matrix_unit
  timeout 90 /tmp/rp/engine_test steps_in bit prompts_joining; } 2>&1 |
    grep -E "^test |result|panicked" | tee -a $OUT/tests.log | grep -E "result|panicked"
for s in base rp rot; do
    b=/tmp/${s/rot/rp}
    BRASS_COLUMNS_ROTATE=$([ $s = rot ] && echo 1 || echo 0) timeout 100 $b/matmul_bench \
        --shapes llama3-8b --types q4_k,q6_k --tokens 16,32 --kernels columns --unpacked none \
        --iters 20 --matrices attn_q,ffn_up,ffn_down --columns 2:1:4:2,4:2:4:2:4 2>&1 |
        grep columns | tr -s ' ' | sed -E "s/^/$s /; s/matmul.(q._k)_columns 16x16 f16 wg256 /\1 /" |
        cut -c1-110
done | tee $OUT/kernels.txt | grep -E "q4_k.*(ffn_up|ffn_down)"
wait_synth
for n in 32 16 32; do
    parallel_8b /tmp/base base --parallel $n
    parallel_8b /tmp/rp rp --parallel $n --decode-column-spans 2
    parallel_8b /tmp/rp one --parallel $n
    [ $n = 32 ] && BRASS_COLUMNS_ROTATE=1 parallel_8b /tmp/rp rot --parallel $n --decode-column-spans 2
done
/tmp/rp/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel-prompt 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | grep -E "sequences|one pass" |
    cut -c1-400 | sed "s/^/json /" | tee -a "$OUT/parallel.log"
timeout 60 /tmp/rp/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 64 2>&1 |
    grep -E "decode at" | tee -a $OUT/parallel.log | cut -c1-200
echo "== done at ${SECONDS}s"
