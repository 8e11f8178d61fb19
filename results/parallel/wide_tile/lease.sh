#!/bin/bash
# Issue 42: the decode columns' wide tile (steps of more than 16 rows) in 4 blocks of
# rows, each subgroup taking two of the narrow tile's 4 parts of K (`kp`), so that a
# row's bits stay those of the narrow tile (2 row blocks, a part a subgroup), against
# `sd` (both tiles in 2 row blocks: the build before, as lease4). Then the crossover
# from the staged columns to the matrix units at 13-15 rows (lease4: the staged columns
# won at 12 rows, the units at 16), and the staged columns at 8 rows on at most 132
# workgroups (lease4's kernels: 14,336-row matrices and the head faster).
# Carry .gl .bin/sd .bin/kp.
source results/lease_setup.sh
for s in sd kp; do unpack_bin $s /tmp/$s; done
B=/tmp/kp
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
{ timeout 100 $B/matmul_test decode_columns every_decode_columns matrix_unit
  timeout 60 $B/engine_test steps_in bit; } 2>&1 | grep -E "^test |result|panicked" |
    tee -a $OUT/tests.log
wait_synth
# The most telling first: what comes back of a call cut short is what it did.
parallel_8b $B kp --parallel 32
parallel_8b /tmp/sd sd --parallel 32
parallel_8b $B kp --parallel 32
parallel_8b $B kp --parallel 16
for round in 1 2; do
    parallel_8b $B kp --parallel 8
    parallel_8b $B groups132 --parallel 8 --coop-groups 132
done
for n in 14 13 15; do
    parallel_8b $B units --parallel $n
    parallel_8b $B columns --parallel $n --decode-units-from $((n + 1))
done
parallel_8b $B kp --parallel 24
parallel_8b /tmp/sd sd --parallel 24
$B/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel-prompt 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | grep -E "sequences|one pass" |
    cut -c1-400 | sed "s/^/json /" | tee -a "$OUT/parallel.log"
timeout 120 $B/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 16,32 \
    --kernels columns --unpacked none --iters 20 --columns 2:1:4:2,2:2:4:2,4:2:4:2,4:2:4:2:4 \
    >$OUT/columns_bench.log 2>&1
grep -E "columns" $OUT/columns_bench.log | awk '{print $2,$3,$(NF-6),$(NF-5),$NF}' | head -40
echo "== done at ${SECONDS}s"
