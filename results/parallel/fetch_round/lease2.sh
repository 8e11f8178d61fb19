#!/bin/bash
# Issue 42, after lease.sh (a round's loads all issued before any is staged: 32
# sequences 1.10x): the change as it lands (`fr3`, fetch_round after the round's first
# barrier, as `fr` measured) against the same with the loads issued before that barrier
# (`pre`, pre_barrier.patch: they pass under the wait for the other subgroups'
# multiplies), alternated; the crossover between the column matvec and the matrix units
# re-timed at 12 and 13 rows; then compare --parallel 1,8,32 and llama.cpp's batched
# decode beside it, in the same lease (its library builds in the background meanwhile).
# Carry .gl .anchors .bin/fr3 .bin/pre (results/parallel/vec4_staging/build_set.sh).
source results/lease_setup.sh
start_llama_library_build
for s in fr3 pre; do unpack_bin $s /tmp/$s; done
B=/tmp/fr3
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for s in fr3 pre; do
    { timeout 100 /tmp/$s/matmul_test decode_columns every_coop_matrix matrix_unit
      timeout 60 /tmp/$s/engine_test steps_in bit prompts_joining; } 2>&1 |
        grep -E "^test |result|panicked" | sed "s/^/$s /" | tee -a $OUT/tests.log | grep -E "result|panicked"
done
for s in fr3 pre; do
    timeout 100 /tmp/$s/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 16,32 \
        --kernels columns --unpacked none --iters 20 --matrices attn_q,ffn_up,ffn_down \
        --columns 2:1:4:2,4:2:4:2:4 2>&1 | grep columns | tr -s ' ' |
        sed -E "s/^/$s /; s/matmul.(q._k)_columns 16x16 f16 wg256 /\1 /" | cut -c1-110
done | tee $OUT/kernels.txt | grep -E "q4_k.*(ffn_up|ffn_down)"
wait_synth
for n in 32 16 32; do
    parallel_8b /tmp/fr3 fr3 --parallel $n
    parallel_8b /tmp/pre pre --parallel $n
done
# The crossover: 12 rows on the matrix units against the column matvec (the plan's),
# 13 on the column matvec against the matrix units (the plan's).
parallel_8b $B units12 --parallel 12 --decode-units-from 12
parallel_8b $B matvec12 --parallel 12
parallel_8b $B matvec13 --parallel 13 --decode-units-from 14
parallel_8b $B units13 --parallel 13
$B/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel-prompt 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | grep -E "sequences|one pass" |
    cut -c1-400 | sed "s/^/json /" | tee -a "$OUT/parallel.log"
timeout 60 $B/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 64 2>&1 | grep -E "decode at" |
    tee -a $OUT/parallel.log | cut -c1-200
llama_batched "$(ls $BRASS_CACHE/synthetic/llama3-8b*.gguf | head -1)"
echo "== done at ${SECONDS}s"
