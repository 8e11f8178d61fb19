#!/bin/bash
# Issue 42, staged columns: how many workgroups (each stages the step's 8 columns of x
# once, then takes its share of row batches) against the router's count, by kernel.
# Carry .gl .bin/sc.
source results/lease_setup.sh
unpack_bin sc /tmp/sc
K="--shapes llama3-8b --types q4_k,q6_k --kernels q4_k_dot4,q6_k_dot4 --iters 20 --x-staged --cols 8"
row() { grep -E "^llama3-8b" | awk '{printf "%s %s %s", $2, $3, $4; print " |", $(NF-7), "us", $(NF-4)}'; }
{
echo "== router's count"; /tmp/sc/matvec_bench $K 2>&1 | row
for g in 132 264 396 528 792; do
  echo "== at most $g workgroups"; /tmp/sc/matvec_bench $K --coop-groups $g 2>&1 | row
done
echo "== router's count again"; /tmp/sc/matvec_bench $K 2>&1 | row
} 2>&1 | tee $OUT/bench_groups.log
