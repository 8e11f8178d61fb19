#!/bin/bash
# Lease for issue 41: K/V and matmul groups fetched a phase ahead (flash attention's
# next K tile under P V and its V tile under Q Kᵀ; the tiled matmuls' next K step under
# the step's multiplies) against HEAD before it (.bin/$OLD), alternated, and llama.cpp
# CUDA beside. Run from the checkout's root with carry [.gl, .anchors, .bin/$OLD,
# .bin/$NEW]; PHASES picks.
#
# Ran 2026-12-05 on an H100: PHASES="llama_build tests bench", NEW=new (every type
# fetched ahead; h100_2026-12-05_lease1/). Refused then (no machine, loans paused):
# NEW=new3 (HEAD's Q6_K fetched at its step, plus flash_q_in_matrices.patch; its
# profile_step is HEAD's) PHASES="llama_build tests flash_tiles profile pp", then
# "pp_small matmul llama" while the machine is warm. Next: OLD = this commit's parent,
# NEW = this commit + the patch, the same two calls.
set -u
OLD=${OLD:-head}
NEW=${NEW:-new}
PHASES=${PHASES:-"llama_build tests bench"}
source results/lease_setup.sh
# Each set in its own folder (a warm machine keeps what earlier calls unpacked), linked
# as old and new.
unpack_bin "$OLD" "/tmp/sets/$OLD"
unpack_bin "$NEW" "/tmp/sets/$NEW"
ln -sfn "/tmp/sets/$OLD" /tmp/old
ln -sfn "/tmp/sets/$NEW" /tmp/new
has() { [[ " $PHASES " == *" $1 "* ]]; }
if has llama_build; then
    start_llama_build
fi
ls "$BRASS_CACHE"/synthetic 2>/dev/null | grep -q llama3-8b ||
    (timeout 200 /tmp/old/compare --synthetic llama3-8b --skip-matvec --pp 64 -n 1 >/dev/null 2>&1 &)
if has tests; then
    for t in matmul_test prefill_test attention_test; do
        timeout 150 "/tmp/new/$t" --skip default_model \
            --skip prompt_logits_leave_the_greedy_tokens_unchanged >"$OUT/$t.log" 2>&1
        echo "$t exited $? ($(grep -E '^test result' "$OUT/$t.log" | tail -1))"
    done
fi
if has bench; then
    for b in ${ORDER:-old new}; do
        timeout 120 /tmp/$b/attention_bench --shapes llama3-8b,smollm2 --kv f16 --no-decode \
            --prefill-tokens 512,2048,8192 --iters 3 2>&1 | sed "s/^/$b /" |
            tee -a "$OUT/attention_bench.log" | grep -E "flash" | cut -c1-190
        timeout 90 /tmp/$b/matmul_bench --shapes llama3-8b --types q4_k,q6_k --kernels dot4 \
            --matrices attn_q,attn_k,ffn_up,ffn_down --tokens 512,2048 --unpacked none \
            --columns 2:2:4 --iters 5 2>&1 | grep -E "coopmat|columns" | sed "s/^/$b /" |
            tee -a "$OUT/matmul_bench.log" | cut -c1-150
    done
fi
if has matmul; then
    for b in old new old new; do
        timeout 90 /tmp/$b/matmul_bench --shapes llama3-8b --types ${TYPES:-q4_k,q6_k} \
            --kernels dot4 --matrices attn_q,attn_k,ffn_up,ffn_down --tokens 512,2048 \
            --unpacked none --iters 5 2>&1 | grep -E "coopmat" | sed "s/^/$b /" |
            tee -a "$OUT/matmul_bench.log" | cut -c1-150
    done
fi
if has flash_tiles; then
    for b in old new; do
        tiles=(); [ $b = new ] && tiles=(--flash-tiles 64:32,32:64)
        timeout 150 /tmp/$b/attention_bench --shapes llama3-8b,smollm2 --kv f16,q8_0 \
            --no-decode --prefill-tokens 512,2048,8192 "${tiles[@]}" --iters 3 2>&1 |
            sed "s/^/$b /" | tee -a "$OUT/flash_tiles.log" | grep -E "flash" | cut -c1-190
    done
fi
if has profile; then
    f=$(ls "$BRASS_CACHE"/synthetic/llama3-8b*.gguf | head -1)
    for at in "512 0" "512 1536"; do
        set -- $at
        timeout 120 /tmp/new/profile_step "$f" --prompt $1 --depth $2 2>&1 |
            sed "s/^/prompt=$1 depth=$2 /" | tee -a "$OUT/profile_8b.log" | head -16 | cut -c1-150
    done
fi
if has pp; then
    for b in old new old new; do
        timeout 100 /tmp/$b/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 32 \
            2>&1 | grep -E "prompt of|decode at" | sed "s/^/$b /" | tee -a "$OUT/pp.log" |
            cut -c1-150
    done
fi
if has ubatch; then
    # Issue 41's item 3: the batch size by measurement (the default is 512).
    for u in 512 1024 2048 512 1024 2048; do
        timeout 100 /tmp/new/compare --synthetic llama3-8b --skip-matvec --pp 2048 -n 1 \
            --ubatch $u 2>&1 | grep -E "prompt of" | sed "s/^/ubatch=$u /" |
            tee -a "$OUT/ubatch.log" | cut -c1-150
    done
fi
if has pp_small; then
    for b in old new old new; do
        timeout 60 /tmp/$b/compare --synthetic smollm2-135m --skip-matvec --pp 512,2048 -n 32 \
            2>&1 | grep -E "prompt of|decode at" | sed "s/^/$b /" |
            tee -a "$OUT/pp_smollm2.log" | cut -c1-150
    done
fi
if has llama; then
    llama_bench_synthetic "$OUT/llama.log"
fi
