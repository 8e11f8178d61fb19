#!/bin/bash
# Issue 42: matrices whose narrow tile fills the device sum K in one span (`os`, the
# gate and up projections and the head; Tuning::columns_one_span_row_tiles) against
# every matrix in two (`os --decode-column-spans 2`, the rule before), the same binary,
# alternated at 32 and 16 sequences; then the plan's --parallel 1,8,32.
# Carry .gl .bin/os (results/parallel/vec4_staging/build_set.sh from main with
# one_span.patch applied). lease.sh times the same rule beside row pairs; this is the
# rule alone, should row pairs not land.
source results/lease_setup.sh
unpack_bin os /tmp/os
start_synth /tmp/os/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
{ timeout 100 /tmp/os/matmul_test decode_columns
  timeout 90 /tmp/os/engine_test steps_in bit prompts_joining; } 2>&1 |
    grep -E "^test |result|panicked" | tee -a $OUT/tests.log | grep -E "result|panicked"
wait_synth
for n in 32 16 32 16; do
    parallel_8b /tmp/os two --parallel $n --decode-column-spans 2
    parallel_8b /tmp/os one --parallel $n
done
/tmp/os/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel-prompt 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | grep -E "sequences|one pass" |
    cut -c1-400 | sed "s/^/json /" | tee -a "$OUT/parallel.log"
echo "== done at ${SECONDS}s"
