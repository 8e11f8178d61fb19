#!/bin/bash
# Lease for issue 41 after the q-in-matrices flash kernel (q held in matrices for the
# walk; 64 x 64 tiles for heads of 128 values and more, 64 x 32 below): the prompts of
# four shapes end to end against 6104bf1 (.bin/$OLD, before this issue's last two stops),
# alternated, llama.cpp CUDA beside; the kernel's tests on the matrix units; the scores
# padded (.bin/$PAD) against it. Run from the checkout's root with carry [.gl, .anchors,
# .bin/$OLD, .bin/$NEW, .bin/$PAD]; PHASES picks, in the order written here.
set -u
OLD=${OLD:-head}
NEW=${NEW:-qm}
PAD=${PAD:-pad}
# Issue 42: the decode columns (columns.wgsl) fetching a round ahead, not landed:
COL=${COL:-col} # built with results/many_sequences/columns_fetch_ahead.patch applied
PHASES=${PHASES:-"llama_build synth tests pp"}
source results/lease_setup.sh
for s in "$OLD" "$NEW" "$PAD" "$COL"; do [ -d ".bin/$s" ] && unpack_bin "$s" "/tmp/sets/$s"; done
old=/tmp/sets/$OLD new=/tmp/sets/$NEW pad=/tmp/sets/$PAD col=/tmp/sets/$COL
has() { [[ " $PHASES " == *" $1 "* ]]; }
SHAPES=${SHAPES:-"smollm2-135m llama3.2-1b qwen2.5-1.5b"}
has llama_build && start_llama_build
has synth && start_synth $new/compare llama3-8b $SHAPES
if has tests; then
    for t in attention_test matmul_test prefill_test; do
        timeout 150 "$new/$t" --skip default_model \
            --skip prompt_logits_leave_the_greedy_tokens_unchanged >"$OUT/$t.log" 2>&1
        echo "$t exited $? ($(grep -E '^test result' "$OUT/$t.log" | tail -1))"
    done
fi
if has pad_tests; then
    timeout 120 "$pad/attention_test" >"$OUT/pad_attention_test.log" 2>&1
    echo "pad attention_test exited $? ($(grep -E '^test result' "$OUT/pad_attention_test.log"))"
fi
if has pp; then
    wait_synth
    for b in old new old new; do
        timeout 100 ${!b}/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 32 \
            2>&1 | grep -E "prompt of|decode at" | sed "s/^/$b /" | tee -a "$OUT/pp_8b.log" |
            cut -c1-150
    done
fi
if has pp_small; then
    wait_synth
    for s in $SHAPES; do
        for b in old new old new; do
            timeout 60 ${!b}/compare --synthetic $s --skip-matvec --pp 512,2048 -n 32 2>&1 |
                grep -E "prompt of|decode at" | sed "s/^/$s $b /" |
                tee -a "$OUT/pp_small.log" | cut -c1-150
        done
    done
fi
if has pad_tiles; then
    for b in new pad new pad; do
        timeout 100 ${!b}/attention_bench --shapes llama3-8b,smollm2 --kv f16 --no-decode \
            --prefill-tokens 512,2048,8192 --iters 3 2>&1 | sed "s/^/$b /" |
            tee -a "$OUT/pad_tiles.log" | grep -E "flash" | cut -c1-190
    done
fi
if has ubatch; then
    # Issue 41's item 3: the batch size by measurement (the default is 512).
    for u in 512 1024 2048 512 1024 2048; do
        timeout 100 $new/compare --synthetic llama3-8b --skip-matvec --pp 2048 -n 1 \
            --ubatch $u 2>&1 | grep -E "prompt of" | sed "s/^/ubatch=$u /" |
            tee -a "$OUT/ubatch.log" | cut -c1-150
    done
fi
if has profile; then
    f=$(ls "$BRASS_CACHE"/synthetic/llama3-8b*.gguf | head -1)
    for at in "512 0" "512 1536"; do
        set -- $at
        timeout 120 $new/profile_step "$f" --prompt $1 --depth $2 2>&1 |
            sed "s/^/prompt=$1 depth=$2 /" | tee -a "$OUT/profile_8b.log" | head -16 |
            cut -c1-150
    done
fi
if has decode_checks; then
    # The dot4 matvecs without wgpu's clamps (IndexChecks::Kernel) against every kernel
    # clamped, decode alternated (results/matvec_index_checks/).
    for s in smollm2-135m llama3-8b; do
        for c in kernel wgpu kernel wgpu; do
            BRASS_INDEX_CHECKS=$c timeout 60 $new/compare --synthetic $s --skip-matvec \
                --pp 0 -n 128 2>&1 | grep -E "decode at" | sed "s/^/$s checks=$c /" |
                tee -a "$OUT/decode_checks.log" | cut -c1-150
        done
    done
fi
if has columns_tests; then
    for t in matmul_test engine_test; do
        timeout 90 "$col/$t" --skip default_model --skip a_hostile_prompt >"$OUT/col_$t.log" 2>&1
        echo "col $t exited $? ($(grep -E '^test result' "$OUT/col_$t.log" | tail -1))"
    done
fi
if has columns_bench; then
    for b in new col new col; do
        timeout 90 ${!b}/matmul_bench --shapes llama3-8b --types q4_k,q6_k --kernels dot4 \
            --matrices attn_q,ffn_up,ffn_down --tokens 8,16,32 --unpacked none \
            --columns 2:2:4 --iters 5 2>&1 | grep -E "columns" | sed "s/^/$b /" |
            tee -a "$OUT/columns_bench.log" | cut -c1-150
    done
fi
if has parallel; then
    wait_synth
    for b in ${PAR_ORDER:-new col new col}; do
        timeout 140 ${!b}/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
            --parallel 1,8,32 --parallel-prompt 128 2>&1 | grep -E "sequences|decode at" |
            sed "s/^/$b /" | tee -a "$OUT/parallel.log" | cut -c1-150
    done
fi
if has llama; then
    llama_bench_synthetic "$OUT/llama.log"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
