#!/bin/bash
# Lease for issue 41 (it ran on an H100, 2026-12-05): the matrix-unit kernels created without wgpu's index clamps
# (IndexChecks::Kernel, the default on Vulkan) against the same binaries with every
# kernel clamped (BRASS_INDEX_CHECKS=wgpu), alternated; naga's SPIR-V through
# passthrough once beside them. Then issue 42's A/B: decode steps of many sequences
# with x handed quantized by the norms (--x-q8 true) or not.
# Run from the checkout's root with carry [.gl, .anchors, .bin/$BIN]; PHASES picks.
set -u
BIN=${BIN:-ic}
PHASES=${PHASES:-"tests bench pp"}
source results/lease_setup.sh
unpack_bin "$BIN" /tmp
has() { [[ " $PHASES " == *" $1 "* ]]; }
if has llama_build; then
    (setsid nohup bash .anchors/build-on-device.sh cuda >/tmp/llama_build.log 2>&1 &)
fi
(timeout 200 /tmp/compare --synthetic llama3-8b --skip-matvec --pp 64 -n 1 >/dev/null 2>&1 &)
skip="--skip default_model --skip prompt_logits_leave_the_greedy_tokens_unchanged"
if has tests; then
    for t in matmul_test prefill_test engine_test attention_test; do
        timeout 130 "/tmp/$t" $skip >"$OUT/$t.log" 2>&1
        echo "$t exited $? ($(grep -E '^test result' "$OUT/$t.log" | tail -1))"
    done
fi
if has bench; then
    for c in kernel wgpu kernel wgpu passthrough; do
        case $c in
            kernel) env=(BRASS_INDEX_CHECKS=kernel) ;;
            wgpu) env=(BRASS_INDEX_CHECKS=wgpu) ;;
            passthrough) env=(BRASS_SPIRV_PASSTHROUGH=1) ;;
        esac
        env "${env[@]}" timeout 120 /tmp/matmul_bench --shapes llama3-8b --types q4_k,q6_k \
            --kernels dot4 --matrices attn_q,attn_k,ffn_up,ffn_down --tokens 512,2048 \
            --unpacked none --columns 2:2:4 --iters 5 2>&1 | grep -E "coopmat|columns" |
            sed "s/^/checks=$c /" | tee -a "$OUT/matmul_bench.log" | cut -c1-150
    done
fi
if has pp; then
    for c in kernel wgpu kernel wgpu; do
        BRASS_INDEX_CHECKS=$c timeout 100 /tmp/compare --synthetic llama3-8b --skip-matvec \
            --pp 512,2048 -n 32 2>&1 | grep -E "prompt of|decode at" |
            sed "s/^/checks=$c /" | tee -a "$OUT/pp.log" | cut -c1-150
    done
    for c in kernel wgpu; do
        BRASS_INDEX_CHECKS=$c timeout 60 /tmp/compare --synthetic smollm2-135m --skip-matvec \
            --pp 512,2048 -n 32 2>&1 | grep -E "prompt of|decode at" |
            sed "s/^/checks=$c /" | tee -a "$OUT/pp_smollm2.log" | cut -c1-150
    done
fi
if has parallel; then
    for q in default true default true; do
        xq=(); [ "$q" = true ] && xq=(--x-q8 true)
        timeout 140 /tmp/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
            --parallel 1,8,32 --parallel-prompt 128 "${xq[@]}" >>"$OUT/parallel_xq8_$q.log" 2>&1
        grep -E "sequences:" "$OUT/parallel_xq8_$q.log" | tail -3 | cut -c1-150 | sed "s/^/x_q8=$q /"
    done
fi
if has llama; then
    for i in $(seq 60); do [ -x /tmp/anchors/build-cuda/bin/llama-bench ] && break; sleep 5; done
    tail -2 /tmp/llama_build.log
    for f in "$BRASS_CACHE"/synthetic/*.gguf; do
        timeout 200 /tmp/anchors/build-cuda/bin/llama-bench -m "$f" -ngl 99 -fa 1 -r 3 \
            -p 512,2048 -n 32 2>&1 | tee -a "$OUT/llama.log" | grep -E "pp|tg" | cut -c1-170
    done
fi
