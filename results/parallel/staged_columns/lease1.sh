#!/bin/bash
# Issue 42, staged columns: the dot4 column matvec staging up to 8 of a step's columns
# of x at once and dotting each loaded slice with every one, against one column at a
# time (--staged-columns false), by kernel and end to end; the single sequence against
# the build before (ks: 5470041 with the defaults of 108690e given as flags). Carry .gl
# .bin/sc .bin/ks.
source results/lease_setup.sh
unpack_bin sc /tmp/sc
unpack_bin ks /tmp/ks
B=/tmp/sc
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
$B/matvec_test dot4 2>&1 | grep -E "^test |result|panicked" | tee $OUT/matvec_test.log
K="--shapes llama3-8b --types q4_k,q6_k --kernels q4_k_dot4,q6_k_dot4 --iters 20"
row() { grep -E "^llama3-8b" | awk '{printf "%s %s %s", $2, $3, $4; for(i=6;i<=NF;i++) if ($i ~ /^x_direct|columns|x_cols|prefetch|queue/) printf " %s", $i; print " |", $(NF-7), "us", $(NF-4)}'; }
{
echo "== cols 8 staged columns"; $B/matvec_bench $K --cols 8 2>&1 | row
echo "== cols 8 one at a time"; $B/matvec_bench $K --cols 8 --staged-columns false 2>&1 | row
echo "== cols 1"; $B/matvec_bench $K --cols 1 2>&1 | row
echo "== cols 2 staged columns"; $B/matvec_bench $K --cols 2 2>&1 | row
} 2>&1 | tee $OUT/bench.log
wait_synth
parallel_8b $B sc --parallel 8
parallel_8b $B off --parallel 8 --staged-columns false
parallel_8b /tmp/ks ks --parallel 1 --decode-column-spans 2 --decode-units-from 9
parallel_8b $B sc --parallel 1
parallel_8b $B sc_mv16 --parallel 16 --decode-units-from 17
parallel_8b $B sc --parallel 16
parallel_8b $B sc_mv12 --parallel 12 --decode-units-from 13
parallel_8b $B sc --parallel 4
$B/engine_test sequence 2>&1 | grep -E "^test |result|panicked" | tee $OUT/engine_test.log
