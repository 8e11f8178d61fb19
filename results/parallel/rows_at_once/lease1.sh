#!/bin/bash
# Issue 42, rows at once (first look): the dot4 column matvec with each subgroup taking
# 1, 2 or 4 weight rows at once (x read in place), against the default route, by kernel
# and end to end. Carry .gl .bin/ra.
source results/lease_setup.sh
unpack_bin ra /tmp/ra
B=/tmp/ra
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
$B/matvec_test dot4_columns 2>&1 | grep -E "^test |result" | tee $OUT/matvec_test.log
K="--shapes llama3-8b --types q4_k,q6_k --kernels q4_k_dot4,q6_k_dot4 --iters 20"
row() { grep -E "^llama3-8b" | awk '{printf "%s %s %s", $2, $3, $4; for(i=6;i<=NF;i++) if ($i ~ /^x_direct|columns|rows_at/) printf " %s", $i; print " |", $(NF-7), "us", $(NF-4)}'; }
{
echo "== cols 8 old (x staged copy, one at a time)"; $B/matvec_bench $K --x-staged --cols 8 2>&1 | row
echo "== cols 8 x-direct columns 8 rows 4"; $B/matvec_bench $K --x-direct --cols 8 --columns-at-once 8 --rows-at-once 4 2>&1 | row
echo "== cols 1 default (one row at a time, x staged)"; $B/matvec_bench $K --cols 1 2>&1 | row
echo "== cols 1 x-direct columns 8 rows 4"; $B/matvec_bench $K --x-direct --cols 1 --columns-at-once 8 --rows-at-once 4 2>&1 | row
} 2>&1 | tee $OUT/bench.log
wait_synth
parallel_8b $B old --parallel 1,8
parallel_8b $B c8r4 --parallel 1,8 --columns-at-once 8 --rows-at-once 4
parallel_8b $B c8r4mv16 --parallel 16 --decode-units-from 17 --columns-at-once 8 --rows-at-once 4
parallel_8b $B mu16 --parallel 16
{
echo "== cols 4 x-direct columns 4 rows 4"; $B/matvec_bench $K --x-direct --cols 4 --columns-at-once 4 --rows-at-once 4 2>&1 | row
for r in 1 2; do
  echo "== cols 8 x-direct columns 8 rows $r"; $B/matvec_bench $K --x-direct --cols 8 --columns-at-once 8 --rows-at-once $r 2>&1 | row
done
} 2>&1 | tee $OUT/bench2.log
