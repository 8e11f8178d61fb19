#!/bin/bash
# Staging stores turned per invocation (coop_staging.wgsl's store_turn: 32 banks a
# store, not 8): the matrix-unit kernels' tests, the decode columns and the prompt
# matmuls alone (this build), then decode of many sequences and prompts with the build
# before (.bin/fr) and this one (.bin/rot), alternated. Carry .gl .bin/fr .bin/rot.
source results/lease_setup.sh
unpack_bin fr /tmp/sets/fr; unpack_bin rot /tmp/sets/rot
fr=/tmp/sets/fr; rot=/tmp/sets/rot
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.log
start_synth $rot/compare llama3-8b
timeout 150 $rot/matmul_test 2>&1 | grep -E "^test |test result" | tee $OUT/matmul_test.log | tail -3
timeout 200 $rot/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 8,16,32 \
    --kernels columns --unpacked none --iters 20 --columns 2:2:4,2:1:4,4:2:4,4:1:4 \
    >$OUT/columns_bench.log 2>&1
grep -E "columns" $OUT/columns_bench.log | awk '{print $1,$2,$3,$9,$10,$11,$13,$14,$15,$17}' | head -70
for b in fr rot; do
    timeout 200 ${!b}/matmul_bench --shapes llama3-8b --types q4_k --tokens 512,2048 \
        --kernels q4_k --unpacked none --iters 10 >$OUT/prompt_bench_$b.log 2>&1
    grep -E "coopmat" $OUT/prompt_bench_$b.log | awk -v b=$b '{print b,$2,$3,$4,$8,$9,$10,$11}'
done
wait_synth
for b in rot fr rot; do parallel_8b ${!b} $b --parallel 8,16,32; done
parallel_8b $rot rot_from4 --parallel 4,8,12 --decode-units-from 4
for b in fr rot fr rot; do
    timeout 100 ${!b}/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 1 2>&1 |
        grep -E "prompt|pp" | sed "s/^/$b /" | tee -a $OUT/pp.log | cut -c1-200
done
timeout 150 $rot/engine_test 2>&1 | grep -E "^test |test result" | tee $OUT/engine_test.log | tail -3
echo "== done at ${SECONDS}s"
