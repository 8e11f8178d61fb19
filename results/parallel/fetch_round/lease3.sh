#!/bin/bash
# Issue 42: lease2.sh cut to what about 300 s of device time holds (the session's budget
# went on failed starts): the landed build (`fr3`) against pre_barrier.patch (`pre`) on
# the kernels and at 32 sequences, alternated, and the crossover re-timed at 12 and 13
# rows. No llama.cpp (its build alone takes four minutes). Carry .gl .bin/fr3 .bin/pre.
source results/lease_setup.sh
for s in fr3 pre; do unpack_bin $s /tmp/$s; done
B=/tmp/fr3
start_synth $B/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
timeout 60 /tmp/pre/matmul_test decode_columns matrix_unit 2>&1 | grep -E "^test |result|panicked" |
    sed "s/^/pre /" | tee -a $OUT/tests.log | grep -E "result|panicked"
for s in fr3 pre; do
    timeout 60 /tmp/$s/matmul_bench --shapes llama3-8b --types q4_k --tokens 16,32 \
        --kernels columns --unpacked none --iters 20 --matrices ffn_up,ffn_down \
        --columns 2:1:4:2,4:2:4:2:4 2>&1 | grep columns | tr -s ' ' |
        sed -E "s/^/$s /; s/matmul.(q._k)_columns 16x16 f16 wg256 /\1 /" | cut -c1-110
done | tee $OUT/kernels.txt
wait_synth
for s in fr3 pre fr3 pre; do parallel_8b /tmp/$s $s --parallel 32; done
parallel_8b $B units12 --parallel 12 --decode-units-from 12
parallel_8b $B matvec12 --parallel 12
parallel_8b $B matvec13 --parallel 13 --decode-units-from 14
parallel_8b $B units13 --parallel 13
echo "== done at ${SECONDS}s"
