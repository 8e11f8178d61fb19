#!/bin/bash
# The look-ahead (look_ahead.patch) against 8dbf530 (.bin/ubc): its test on the matrix
# units, the bench against the scores' spread, the 8B prompts. Carry .gl .bin/ubc .bin/la.
source results/lease_setup.sh
unpack_bin ubc /tmp/sets/ubc; unpack_bin la /tmp/sets/la
new=/tmp/sets/ubc; la=/tmp/sets/la
start_synth $new/compare llama3-8b
timeout 70 $la/attention_test prefill_attention >"$OUT/la_attention_test.log" 2>&1; echo "la attention_test exited $? ($(grep -E '^test result' $OUT/la_attention_test.log))"
for b in new la; do timeout 45 ${!b}/attention_bench --shapes llama3-8b,smollm2 --kv f16 --no-decode --prefill-tokens 512,2048 --score-std 0,4,16 --iters 3 --warmup-ms 100 2>&1 | sed "s/^/$b /" | tee -a $OUT/spread.log | grep flash | awk '{print $1,$2,$(NF-9),$(NF-7),$(NF-5)}'; done
wait_synth
for b in new la new la; do timeout 30 ${!b}/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 1 2>&1 | grep -E "prompt of" | sed "s/^/$b /" | tee -a $OUT/pp.log | cut -c1-110; done
