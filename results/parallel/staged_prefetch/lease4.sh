#!/bin/bash
# Issue 42, the staged columns with both of lease3.sh's findings as rules (`sd`: a
# full run with no branch per column, and teams of lanes per row where at least 128
# row batches remain; `--coop-lanes 0` the same build without teams), against lease3's
# `sx` (slices ahead and no branch per column), by kernel at 8 columns (and at most 132
# workgroups), end to end at 8, 1 and 32 sequences, 16 on the matrix units
# (the rule) or in 2 runs of staged columns, and 12, the decode columns in 4 blocks
# of rows at 32 and 16 (`--decode-row-blocks 4`), and the bit-for-bit tests on NVIDIA.
# llama.cpp's batched decode on the same file closes the lease (its CUDA library builds in
# the background meanwhile; GPU times are unaffected, host recording shares the cores).
# Carry .gl .anchors .bin/sx .bin/sd.
source results/lease_setup.sh
start_llama_library_build
for s in sx sd; do unpack_bin $s /tmp/$s; done
B=/tmp/sd
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
K="--shapes llama3-8b --types q4_k,q6_k --kernels q4_k_dot4,q6_k_dot4 --iters 20 --x-staged --cols 8"
row() { grep -E "^llama3-8b" | awk '{printf "%s %s %s", $2, $3, $4; print " |", $(NF-7), "us", $(NF-4)}'; }
bench() { local b=$1; shift; echo "== $b $*"; /tmp/$b/matvec_bench $K "$@" 2>&1 | row; }
{ bench sx; bench sd; bench sd --coop-lanes 0; bench sd --coop-groups 132; } 2>&1 |
  tee -a $OUT/bench.log
{ timeout 90 $B/matvec_test staged_columns columns_at_once
  timeout 90 $B/engine_test bit; } 2>&1 | grep -E "^test |result|panicked" | tee -a $OUT/tests.log
wait_synth
for s in sx sd; do parallel_8b /tmp/$s $s --parallel 8; done
parallel_8b $B no-teams --parallel 8 --coop-lanes 0
parallel_8b $B lanes16 --parallel 8 --coop-lanes 16
parallel_8b $B sd --parallel 8
parallel_8b $B no-teams --parallel 8 --coop-lanes 0
for n in 16 12; do
    parallel_8b $B units --parallel $n
    parallel_8b $B columns --parallel $n --decode-units-from 17
done
parallel_8b $B sd --parallel 1
# The decode columns in 4 blocks of rows (64 x 32 a workgroup) against the tile's 2, at
# 32 and 16 sequences (results/parallel/columns_experiments, section 6: 14,336-row
# matrices faster at 32 rows, 4,096-row ones slower unless K is split).
for n in 32 16; do
    parallel_8b $B rows2 --parallel $n
    parallel_8b $B rows4 --parallel $n --decode-row-blocks 4
done
$B/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel-prompt 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | grep -E "sequences|one pass" |
    cut -c1-400 | sed "s/^/json /" | tee -a "$OUT/parallel.log"
llama_batched "$(ls $BRASS_CACHE/synthetic/*.gguf | head -1)"
