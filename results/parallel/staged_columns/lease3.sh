#!/bin/bash
# Issue 42, staged columns, third build (su): the columns written out with one named
# accumulator each, against the second (sc, a loop over an indexed array). Carry .gl
# .bin/sc .bin/su.
source results/lease_setup.sh
unpack_bin sc /tmp/sc
unpack_bin su /tmp/su
start_synth /tmp/su/compare llama3-8b
timeout 60 /tmp/su/pipeline_stats --types q4_k,q6_k --m 14336 --k 4096 --x-q8 --columns 8 --flavours wgpu 2>&1 | tee $OUT/pipeline_stats.txt | grep -E "Register|columns"
/tmp/su/matvec_test dot4 2>&1 | grep -E "^test result|panicked|FAILED" | tee $OUT/matvec_test.log
K="--shapes llama3-8b --types q4_k,q6_k --kernels q4_k_dot4,q6_k_dot4 --iters 20 --x-staged"
row() { grep -E "^llama3-8b" | awk '{printf "%s %s %s", $2, $3, $4; for(i=6;i<=NF;i++) if ($i ~ /^columns|x_cols/) printf " %s", $i; print " |", $(NF-7), "us", $(NF-4)}'; }
{
echo "== cols 8 su"; /tmp/su/matvec_bench $K --cols 8 2>&1 | row
echo "== cols 8 sc"; /tmp/sc/matvec_bench $K --cols 8 2>&1 | row
} 2>&1 | tee $OUT/bench.log
wait_synth
parallel_8b /tmp/su su --parallel 8
parallel_8b /tmp/sc sc --parallel 8
parallel_8b /tmp/su su --parallel 1
parallel_8b /tmp/su su --parallel 4
