#!/bin/bash
# Issue 42: the matrix-unit kernels' staging in stores of four values (`v4`: staged as
# array<vec4<CT>>, matrices loaded through vector pointers) against `base` (159f120:
# a scalar store per value). Tests of v4 on the matrix units first, then the kernels
# (decode columns, prompt coopmat) and the 8B shape end to end, both builds
# alternated; then compare --parallel 1,8,32 and llama.cpp's batched decode beside it.
# Carry .gl .anchors .bin/base .bin/v4.
source results/lease_setup.sh
for s in base v4; do unpack_bin $s /tmp/$s; done
start_llama_library_build
B=/tmp/v4
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
{ timeout 120 $B/matmul_test decode_columns every_decode_columns every_coop_matrix matrix_unit
  timeout 60 $B/engine_test steps_in bit; } 2>&1 | grep -E "^test |result|panicked" |
    tee -a $OUT/tests.log
for s in base v4; do
    timeout 60 /tmp/$s/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 16,32 \
        --kernels columns --unpacked none --iters 20 --columns 2:1:4:2,4:2:4:1:4 \
        >$OUT/kernels_$s.log 2>&1
    timeout 60 /tmp/$s/matmul_bench --shapes llama3-8b --types q4_k --tokens 512,2048 \
        --kernels coopmat --unpacked none --iters 10 >>$OUT/kernels_$s.log 2>&1
    grep -E "columns|coopmat" $OUT/kernels_$s.log | awk -v s=$s '{print s,$1,$2,$3,$(NF-6),$(NF-5),$NF}' | head -30
done
wait_synth
parallel_8b $B v4 --parallel 32
parallel_8b /tmp/base base --parallel 32
parallel_8b $B v4 --parallel 16
parallel_8b /tmp/base base --parallel 16
for s in v4 base; do
    timeout 120 /tmp/$s/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 16 2>&1 |
        grep -E "prompt of|decode at" | sed "s/^/$s /" | tee -a $OUT/prompt.log | cut -c1-200
done
$B/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel-prompt 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | grep -E "sequences|one pass" |
    cut -c1-400 | sed "s/^/json /" | tee -a "$OUT/parallel.log"
llama_batched "$(ls $BRASS_CACHE/synthetic/llama3-8b*.gguf | head -1)"
echo "== done at ${SECONDS}s"
