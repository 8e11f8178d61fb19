#!/bin/bash
# Issue 42: the decode columns (matmul/columns.wgsl) fetching rounds ahead into
# registers (FETCH_ROUNDS). One call: the columns' tests on the matrix units, the
# kernel at 0, 1, 2 and 4 rounds ahead on the 8B shapes (8, 16 and 32 tokens), then
# decode of many sequences with the build before (.bin/fr) and this one (.bin/cf),
# alternated, and the crossover moved down. Carry .gl .bin/fr .bin/cf.
source results/lease_setup.sh
unpack_bin fr /tmp/sets/fr; unpack_bin cf /tmp/sets/cf
fr=/tmp/sets/fr; cf=/tmp/sets/cf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.log
start_synth $cf/compare llama3-8b
timeout 120 $cf/matmul_test columns 2>&1 | tail -6 | tee $OUT/matmul_test.log
timeout 200 $cf/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 8,16,32 \
    --kernels columns --unpacked none \
    --columns 2:2:4:0,2:2:4:1,2:2:4:2,2:2:4:4,2:1:4:0,2:1:4:2,2:1:4:4,1:1:8:0,1:1:8:4 \
    >$OUT/columns_bench.log 2>&1
grep -E "columns" $OUT/columns_bench.log | cut -c1-150 | head -80
wait_synth
parallel_8b $cf cf --parallel 1,8,16,32
parallel_8b $fr fr --parallel 16,32
parallel_8b $cf cf_from4 --parallel 4,8,12 --decode-units-from 4
parallel_8b $fr fr_from4 --parallel 8 --decode-units-from 4
parallel_8b $cf cf --parallel 16,32
timeout 150 $cf/engine_test 2>&1 | grep -E "^test |test result" | tee $OUT/engine_test.log | tail -4
echo "== done at ${SECONDS}s"
