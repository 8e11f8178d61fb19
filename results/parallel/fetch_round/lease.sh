#!/bin/bash
# Issue 42, after the ablations (results/parallel/vec4_staging, lease3.sh: a wide-tile
# round waits on its weight loads and then on its x loads, one after the other): each
# invocation's loads of a round all issued before any is staged (`fr2`, which is
# fetch_round.patch on 2851cbc), and issued a round ahead under the round before's
# multiplies (BRASS_COLUMNS_AHEAD=1), against v4 (2851cbc as it landed). With every
# load of a round in flight together, rounds of 8 groups may now pay
# (BRASS_COLUMNS_K_GROUPS=8, the plan's K step; lease2.sh had them slower when
# an invocation's loads went one after the other).
# Carry .gl .bin/v4 .bin/fr2 (results/parallel/vec4_staging/build_set.sh; fr2 also has
# pipeline_stats).
source results/lease_setup.sh
for s in v4 fr2; do unpack_bin $s /tmp/$s; done
start_synth /tmp/fr2/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for a in 0 1; do
    { BRASS_COLUMNS_AHEAD=$a timeout 100 /tmp/fr2/matmul_test decode_columns matrix_unit
      BRASS_COLUMNS_AHEAD=$a timeout 60 /tmp/fr2/engine_test steps_in bit; } 2>&1 |
        grep -E "^test |result|panicked" | sed "s/^/ahead$a /" | tee -a $OUT/tests.log | grep -E "result|panicked"
done
{ BRASS_COLUMNS_AHEAD=1 BRASS_COLUMNS_K_GROUPS=8 timeout 60 /tmp/fr2/engine_test steps_in bit; } 2>&1 |
    grep -E "^test |result|panicked" | sed "s/^/ahead1_k8 /" | tee -a $OUT/tests.log | grep -E "result|panicked"
for a in 0 1; do
    BRASS_COLUMNS_AHEAD=$a timeout 60 /tmp/fr2/pipeline_stats --types q4_k --m 14336 --k 4096 --x-q8 \
        --matmul --flavours none --decode-tiles 2:1:4,4:2:4:4,2:1:8,2:2:8 2>&1 |
        grep -B1 "Register" | grep -v "^--" | paste - - |
        sed -E "s/^/ahead$a /; s/Binary.*(Shared Memory Size [0-9]+).*/\1/" | cut -c1-200 | tee -a $OUT/registers.txt
done
bench() {
    local label=$1 dir=$2; shift 2
    env "$@" timeout 100 $dir/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 16,32 \
        --kernels columns --unpacked none --iters 20 --matrices attn_q,ffn_up,ffn_down \
        --columns 2:1:4:2,4:2:4:2:4,2:1:8:2,2:2:8:2,2:2:8:1 2>&1 | grep columns | tr -s ' ' |
        sed -E "s/^/$label /; s/matmul.(q._k)_columns 16x16 f16 wg256 /\1 /" | cut -c1-110
}
{ bench v4 /tmp/v4 X=0; bench fr /tmp/fr2 BRASS_COLUMNS_AHEAD=0; bench ahead /tmp/fr2 BRASS_COLUMNS_AHEAD=1; } |
    tee $OUT/kernels.txt | grep -E "q4_k.*ffn_up"
wait_synth
for n in 32 16; do
    parallel_8b /tmp/v4 v4 --parallel $n
    export BRASS_COLUMNS_AHEAD=0; parallel_8b /tmp/fr2 fr --parallel $n
    export BRASS_COLUMNS_AHEAD=1; parallel_8b /tmp/fr2 ahead --parallel $n
    export BRASS_COLUMNS_K_GROUPS=8; parallel_8b /tmp/fr2 ahead_k8 --parallel $n
    unset BRASS_COLUMNS_AHEAD BRASS_COLUMNS_K_GROUPS
done
echo "== done at ${SECONDS}s"
