#!/bin/bash
# Issue 42, after slices ahead became the staged columns' rule (lease2.sh), one call:
# - the columns of a run dotted without a branch per column (`sx`: the loop over columns
#   clamped to the run's last, `sy`: written out with constant indices, both in
#   columns_unguarded.patch) against the rule (`sa`), by kernel and end to end;
# - how many workgroups and lanes a row the staged columns want at 8 columns (each
#   workgroup stages the step's columns of x, then takes its share of row batches; the
#   question of staged_columns/lease4.sh);
# - the tiles A/B at 4 and 8 sequences;
# - `compare --parallel 1,8,32` beside llama.cpp's batched decode
#   (benches/anchors/llamacpp_batched.cpp) on the same file, llama.cpp CUDA building in
#   the background meanwhile (GPU times are unaffected; host recording shares the cores).
# Carry .gl .anchors .bin/sa .bin/sx .bin/sy.
source results/lease_setup.sh
start_llama_library_build
for s in sa sx sy; do unpack_bin $s /tmp/$s; done
B=/tmp/sa
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
K="--shapes llama3-8b --types q4_k,q6_k --kernels q4_k_dot4,q6_k_dot4 --iters 20 --x-staged --cols 8"
row() { grep -E "^llama3-8b" | awk '{printf "%s %s %s", $2, $3, $4; print " |", $(NF-7), "us", $(NF-4)}'; }
bench() { local b=$1; shift; echo "== $b $*"; /tmp/$b/matvec_bench $K "$@" 2>&1 | row; }
{ for s in sa sx sy sa; do bench $s; done; } 2>&1 | tee -a $OUT/bench_unguarded.log
for s in sx sy; do
  timeout 100 /tmp/$s/matvec_test staged_columns columns_at_once 2>&1 |
    grep -E "^test |result|panicked" | sed "s/^/$s /" | tee -a $OUT/matvec_test.log
done
wait_synth
for round in 1 2; do
  for s in sa sx sy; do parallel_8b /tmp/$s $s --parallel 8; done
done
{
for g in 132 264 396 528 792 1056; do bench sa --coop-groups $g; done
for l in 16 8; do bench sa --coop-lanes $l; done
} 2>&1 | tee -a $OUT/bench_groups.log
parallel_8b $B tiles --parallel 8 --staged-tiles true
parallel_8b $B sa --parallel 4
parallel_8b $B tiles --parallel 4 --staged-tiles true
$B/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel-prompt 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | grep -E "sequences|one pass" |
    cut -c1-400 | tee "$OUT/brass_parallel.log"
llama_batched "$(ls $BRASS_CACHE/synthetic/*.gguf | head -1)"
for s in sa sx sy; do parallel_8b /tmp/$s $s --parallel 8; done
for s in sa sx; do parallel_8b /tmp/$s $s --parallel 1; done
