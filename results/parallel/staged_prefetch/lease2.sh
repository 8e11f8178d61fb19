#!/bin/bash
# Issue 42: the staged columns' two forms built and tested but off until measured, by
# kernel at 8 columns and end to end on the 8B shape: each lane loading its next slice
# ahead (--prefetch / --staged-prefetch true), and all of a step's columns staged tile by
# tile where one tile of all of K holds fewer (--staged-tiles true: K = 14,336 takes 8
# columns in tiles of 4,096 where the default takes 2 at once). Against the defaults
# (main's routes) and main's build itself (sc: 1d5159d, the staged columns as landed).
# Everything is appended as it runs, so a call cut short still returns what ran.
# Carry .gl .bin/sp .bin/sc.
source results/lease_setup.sh
unpack_bin sp /tmp/sp
unpack_bin sc /tmp/sc
B=/tmp/sp
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
K="--shapes llama3-8b --types q4_k,q6_k --kernels q4_k_dot4,q6_k_dot4 --iters 20 --x-staged --cols 8"
row() { grep -E "^llama3-8b" | awk '{printf "%s %s %s", $2, $3, $4; for(i=6;i<=NF;i++) if ($i ~ /^tile|x_cols|prefetch|columns/) printf " %s", $i; print " |", $(NF-7), "us", $(NF-4)}'; }
bench() { echo "== $1"; shift; $B/matvec_bench $K "$@" 2>&1 | row; }
bench "cols 8, ahead and tiles" --prefetch true --staged-tiles true | tee -a $OUT/bench.log
bench "cols 8, defaults" | tee -a $OUT/bench.log
bench "cols 8, tiles" --staged-tiles true --prefetch false | tee -a $OUT/bench.log
bench "cols 8, ahead" --prefetch true | tee -a $OUT/bench.log
timeout 100 $B/matvec_test staged_columns 2>&1 | grep -E "^test |result|panicked" | tee $OUT/matvec_test.log
wait_synth
parallel_8b $B both --parallel 8 --staged-prefetch true --staged-tiles true
parallel_8b $B default --parallel 8
parallel_8b /tmp/sc main --parallel 8
parallel_8b $B ahead --parallel 8 --staged-prefetch true
parallel_8b $B tiles --parallel 8 --staged-tiles true
parallel_8b $B default --parallel 1
parallel_8b /tmp/sc main --parallel 1
parallel_8b $B both --parallel 8 --staged-prefetch true --staged-tiles true
parallel_8b $B default --parallel 8
parallel_8b $B both --parallel 4 --staged-prefetch true --staged-tiles true
parallel_8b $B default --parallel 4
