#!/bin/bash
# Decode columns in a tile of one token block for steps that fit one (DecodeColumns),
# two for more: the tests on the matrix units, then decode of many sequences with the
# build before (.bin/frs) and this one (.bin/tt) alternated, and the crossover moved.
# Carry .gl .bin/frs .bin/tt.
source results/lease_setup.sh
unpack_bin frs /tmp/sets/frs; unpack_bin tt /tmp/sets/tt
fr=/tmp/sets/frs; tt=/tmp/sets/tt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.log
start_synth $tt/compare llama3-8b
timeout 100 $tt/matmul_test columns 2>&1 | grep -E "^test |test result" | tee $OUT/matmul_test.log | tail -4
wait_synth
timeout 100 $tt/engine_test 2>&1 | grep -E "^test |test result" | tee $OUT/engine_test.log | tail -3
for b in tt fr tt; do parallel_8b ${!b} $b --parallel 14,16,24; done
parallel_8b $tt tt_from8 --parallel 8,10,12 --decode-units-from 8
parallel_8b $tt tt --parallel 1,8,32
echo "== done at ${SECONDS}s"
