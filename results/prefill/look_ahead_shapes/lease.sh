#!/bin/bash
# The look-ahead's rescale folded into the next tile's, and its Q Kᵀ a helper (.bin/fr),
# against 1e8519f's look-ahead (.bin/la): the kernel's tests on the matrix units, the
# bench against the scores' spread, every shape's prompts of 512 and 2,048 beside
# llama.cpp CUDA, muse-30b's prompt of 512, and the matmuls at 512 / 2,048 / 8,192
# tokens. Carry .gl .anchors .bin/la .bin/fr. PHASES picks the parts (one call each
# where a lease's calls are 10 minutes).
source results/lease_setup.sh
unpack_bin la /tmp/sets/la; unpack_bin fr /tmp/sets/fr
la=/tmp/sets/la; fr=/tmp/sets/fr
PHASES=${PHASES:-"tests spread pp"}
SHAPES=${SHAPES:-"smollm2-135m llama3.2-1b qwen2.5-1.5b llama3-8b"}
start_llama_build
start_synth $fr/compare $SHAPES ${MUSE:-muse-30b}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $OUT/device.log
for phase in $PHASES; do
    echo "== $phase at ${SECONDS}s"
    case $phase in
    tests)
        timeout 90 $fr/attention_test prefill_attention >$OUT/fr_attention_test.log 2>&1
        echo "attention_test: $? $(grep -E '^test result' $OUT/fr_attention_test.log)"
        timeout 150 $fr/prefill_test >$OUT/fr_prefill_test.log 2>&1
        echo "prefill_test: $? $(grep -E '^test result' $OUT/fr_prefill_test.log)" ;;
    spread)
        for b in ${SPREAD_ORDER:-la fr la fr}; do
            timeout 60 ${!b}/attention_bench --shapes llama3-8b,smollm2 --kv f16 --no-decode \
                --prefill-tokens 512,2048 --score-std 0,4,16 --iters 3 --warmup-ms 100 2>&1 |
                sed "s/^/$b /" | tee -a $OUT/spread.log | grep flash | awk '{print $1,$2,$(NF-9),$(NF-7),$(NF-5)}'
        done ;;
    pp)
        wait_synth
        for s in $SHAPES; do
            for b in ${PP_ORDER:-fr la}; do
                timeout 60 ${!b}/compare --synthetic $s --skip-matvec --pp 512,2048 -n 1 2>&1 |
                    grep -E "prompt of" | sed "s/^/$b /" | tee -a $OUT/pp.log | cut -c1-110
            done
        done ;;
    muse)
        wait_synth
        for b in la fr; do
            timeout 150 ${!b}/compare --synthetic muse-30b --skip-matvec --pp 512 -n 1 2>&1 |
                grep -E "prompt of|error" | sed "s/^/$b /" | tee -a $OUT/muse.log | cut -c1-110
        done ;;
    llama) llama_bench_synthetic $OUT/llama_bench.log ;;
    matmul)
        timeout 200 $fr/matmul_bench --shapes llama3-8b --tokens 512,2048,8192 --iters 5 2>&1 |
            tee $OUT/matmul_bench.log | grep -vE "^\s*$" | cut -c1-150 | tail -40 ;;
    esac
done
echo "== done at ${SECONDS}s"
