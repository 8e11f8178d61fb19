#!/bin/bash
# Issue 42, after slices ahead became the staged columns' rule (lease2.sh): how many
# workgroups the staged columns want at 8 columns (each stages the step's columns of x,
# then takes its share of row batches; the question of staged_columns/lease4.sh), the
# tiles A/B at 4 and 8 sequences, and `compare --parallel 1,8,32` beside llama.cpp's
# batched decode (benches/anchors/llamacpp_batched.cpp) on the same file, llama.cpp CUDA
# building in the background meanwhile (brass's GPU times are unaffected; its host
# recording shares the 16 cores). Carry .gl .anchors .bin/sa.
source results/lease_setup.sh
start_llama_library_build
unpack_bin sa /tmp/sa
B=/tmp/sa
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
K="--shapes llama3-8b --types q4_k,q6_k --kernels q4_k_dot4,q6_k_dot4 --iters 20 --x-staged --cols 8"
row() { grep -E "^llama3-8b" | awk '{printf "%s %s %s", $2, $3, $4; print " |", $(NF-7), "us", $(NF-4)}'; }
{
echo "== router's count"; $B/matvec_bench $K 2>&1 | row
for g in 132 264 396 528 792 1056; do
  echo "== at most $g workgroups"; $B/matvec_bench $K --coop-groups $g 2>&1 | row
done
echo "== router's count again"; $B/matvec_bench $K 2>&1 | row
} 2>&1 | tee -a $OUT/bench_groups.log
timeout 100 $B/matvec_test staged_columns 2>&1 | grep -E "^test |result|panicked" | tee $OUT/matvec_test.log
wait_synth
for round in 1 2; do
  parallel_8b $B ahead --parallel 8
  parallel_8b $B tiles --parallel 8 --staged-tiles true
  parallel_8b $B ahead --parallel 4
  parallel_8b $B tiles --parallel 4 --staged-tiles true
done
$B/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel-prompt 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | grep -E "sequences|one pass" |
    cut -c1-400 | tee "$OUT/brass_parallel.log"
llama_batched "$(ls $BRASS_CACHE/synthetic/*.gguf | head -1)"
parallel_8b $B ahead --parallel 8
parallel_8b $B ahead --parallel 1
