#!/bin/bash
# H200 lease for the vectorized staging of the matrix-unit matmuls (issue 41; issue 42's
# decode columns share it): the kernels' tests on the real matrix units, then the matmul
# bench and the prompts and many-sequence runs of the build before (BASE) and after
# (NEW, also with parts of 4 token blocks), alternated in the same lease, and llama.cpp
# CUDA on the same files.
# Run from the checkout's root with carry [.gl, .anchors, .bin/$BASE, .bin/$NEW]
# (stripped, xz'd binaries: compare and matmul_bench in both; matvec_bench, matmul_test,
# prefill_test and engine_test in NEW), in two calls chained while the machine is warm:
# `PHASES="tests bench" LLAMA_BUILD=1` (llama.cpp's CUDA build, about 4 minutes, starts
# in the background), then `PHASES=pp`, then `PHASES="parallel llama"`.
set -u
phase() { [[ " ${PHASES:-tests bench} " == *" $1 "* ]]; }
BASE=${BASE:-base} NEW=${NEW:-vec}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=${BRASS_CACHE:-/tmp/bc} BRASS_ADAPTER=NVIDIA
mkdir -p /work && ln -sfn "$PWD" /work/main
if { phase llama || [ "${LLAMA_BUILD:-0}" = 1 ]; } && [ ! -e /tmp/anchors/started ]; then
    mkdir -p /tmp/anchors && touch /tmp/anchors/started
    (setsid nohup bash .anchors/build-on-device.sh cuda >/tmp/anchors/build.log 2>&1 &)
fi
for b in "$BASE" "$NEW"; do
    mkdir -p "/tmp/$b"
    for f in .bin/"$b"/*.xz; do
        t="/tmp/$b/$(basename "$f" .xz)"
        [ -x "$t" ] || { xz -dc "$f" >"$t"; chmod +x "$t"; }
    done
done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt"
if phase tests; then
    # The 8B file is written once (4.9 GB) while the tests run.
    (timeout 200 "/tmp/$NEW/compare" --synthetic llama3-8b --skip-matvec --pp 64 -n 1 \
        >"$OUT/synth.log" 2>&1 &)
    skip="--skip default_model --skip prompt_logits_leave_the_greedy_tokens_unchanged"
    for t in ${TESTS:-matmul_test prefill_test engine_test}; do
        timeout 200 "/tmp/$NEW/$t" $skip >"$OUT/$t.log" 2>&1
        echo "$t exited $?" | tee -a "$OUT/$t.log"
    done
    grep -hE "test result|FAILED|panicked" "$OUT"/*_test.log | head -20
fi
if phase bench; then
    # NEW also with parts of 4 token blocks (tiles of 128 rows x 256 tokens).
    for b in "$BASE" "$NEW"; do
        blocks=""; [ "$b" = "$NEW" ] && blocks="--coop-token-blocks 2,4"
        timeout 150 "/tmp/$b/matmul_bench" --shapes llama3-8b --types q4_k,q6_k --kernels dot4 \
            --matrices attn_q,attn_k,ffn_up,ffn_down --tokens 512,2048 --unpacked none \
            --iters 5 $blocks >>"$OUT/matmul_bench_$b.log" 2>&1
        echo "matmul bench $b exited $?" >>"$OUT/matmul_bench_$b.log"
    done
    # A decode step of 8 to 32 sequences: the decode columns against the dot4 matvec
    # taking 8 and 32 columns a dispatch (the route below 20 sequences).
    for b in "$BASE" "$NEW"; do
        timeout 60 "/tmp/$b/matmul_bench" --shapes llama3-8b --types q4_k,q6_k --kernels dot4 \
            --matrices attn_q,ffn_up,ffn_down --tokens 8,16,32 --unpacked none \
            --columns 2:1:4,2:2:4 --iters 5 >"$OUT/matmul_bench_steps_$b.log" 2>&1
    done
    for c in 8 32; do
        timeout 60 "/tmp/$NEW/matvec_bench" --kernels q4_k_dot4,q6_k_dot4 --types q4_k,q6_k \
            --shapes llama3-8b --x-q8 --cols $c 2>&1 | grep -E "llama3" | sed "s/^/cols $c: /" \
            >>"$OUT/matvec_bench_cols.log"
    done
    grep -hE "probe|coopmat|columns" "$OUT"/matmul_bench_*.log | cut -c1-160 | head -90
    cut -c1-160 "$OUT/matvec_bench_cols.log"
fi
if phase pp; then
    for round in $(seq "${ROUNDS:-1}"); do
        for s in llama3-8b smollm2-135m; do
            for v in "$BASE" "$NEW" "$NEW 4"; do
                set -- $v
                extra=""; [ $# = 2 ] && extra="--coop-token-blocks $2"
                timeout 90 "/tmp/$1/compare" --synthetic $s --skip-matvec --pp 512,2048 -n 32 \
                    $extra 2>&1 | grep -E "prompt of|decode at" |
                    sed "s/^/round $round $v $s: /" | tee -a "$OUT/pp.log" | cut -c1-170
            done
        done
    done
fi
if phase parallel; then
    for b in "$BASE" "$NEW"; do
        timeout 150 "/tmp/$b/compare" --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
            --parallel 1,8,32 --parallel-prompt 128 -o "$OUT/parallel_$b.json" \
            >"$OUT/parallel_$b.log" 2>&1
        echo "parallel $b exited $?" >>"$OUT/parallel_$b.log"
        grep -E "sequences:|exited" "$OUT/parallel_$b.log" | cut -c1-170 | sed "s/^/$b: /"
    done
    # Where the decode steps' crossover to the matrix units moves with the faster
    # staging: steps of 4 rows and more on the decode columns.
    timeout 150 "/tmp/$NEW/compare" --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
        --parallel 4,8,16 --parallel-prompt 128 --decode-units-from 4 \
        -o "$OUT/parallel_${NEW}_units4.json" >"$OUT/parallel_${NEW}_units4.log" 2>&1
    echo "parallel units4 exited $?" >>"$OUT/parallel_${NEW}_units4.log"
    grep -E "sequences:|exited" "$OUT/parallel_${NEW}_units4.log" | cut -c1-170 |
        sed "s/^/$NEW from 4 rows: /"
fi
if phase llama; then
    for i in $(seq 60); do [ -x /tmp/anchors/build-cuda/bin/llama-bench ] && break; sleep 5; done
    for f in "$BRASS_CACHE"/synthetic/*.gguf; do
        timeout 200 /tmp/anchors/build-cuda/bin/llama-bench -m "$f" -ngl 99 -fa 1 -r 3 \
            -p 512,2048 -n 32 2>&1 | tee -a "$OUT/llama.log" | grep -E "pp|tg" | cut -c1-170
    done
fi
