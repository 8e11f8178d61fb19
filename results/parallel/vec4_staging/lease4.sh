#!/bin/bash
# Issue 42, after the ablations (lease3.sh: a wide-tile round waits on its weights'
# loads and then on its x loads, one after the other): a round's groups all fetched
# before any is staged (`fr`), and fetched a round ahead, under the round before's
# multiplies (`fr` with BRASS_COLUMNS_AHEAD=1), against v4 (5a87e30's kernels).
# Carry .gl .bin/v4 .bin/fr: v4 built at 5a87e30, fr with fetch_round.patch applied
# there (then `cargo run --release --example spirv`), each by build_set.sh.
source results/lease_setup.sh
for s in v4 fr; do unpack_bin $s /tmp/$s; done
start_synth /tmp/fr/compare llama3-8b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for a in 0 1; do
    { BRASS_COLUMNS_AHEAD=$a timeout 100 /tmp/fr/matmul_test decode_columns matrix_unit
      BRASS_COLUMNS_AHEAD=$a timeout 60 /tmp/fr/engine_test steps_in bit; } 2>&1 |
        grep -E "^test |result|panicked" | sed "s/^/ahead$a /" | tee -a $OUT/tests.log | grep -E "result|panicked"
done
bench() {
    local label=$1 dir=$2; shift 2
    env "$@" timeout 60 $dir/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 16,32 \
        --kernels columns --unpacked none --iters 20 --matrices attn_q,ffn_up,ffn_down \
        --columns 2:1:4:2,4:2:4:2:4 2>&1 | grep columns | tr -s ' ' |
        sed -E "s/^/$label /; s/matmul.(q._k)_columns 16x16 f16 wg256 k_groups4 /\1 /" | cut -c1-100
}
{ bench v4 /tmp/v4 X=0; bench fr /tmp/fr BRASS_COLUMNS_AHEAD=0; bench ahead /tmp/fr BRASS_COLUMNS_AHEAD=1; } |
    tee $OUT/kernels.txt | grep -E "q4_k.*(ffn_up|attn_q)" 
wait_synth
for n in 32 16; do
    parallel_8b /tmp/v4 v4 --parallel $n
    export BRASS_COLUMNS_AHEAD=0; parallel_8b /tmp/fr fr --parallel $n
    export BRASS_COLUMNS_AHEAD=1; parallel_8b /tmp/fr ahead --parallel $n
    unset BRASS_COLUMNS_AHEAD
done

echo "== done at ${SECONDS}s"
