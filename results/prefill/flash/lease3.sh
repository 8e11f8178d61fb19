#!/bin/bash
# H200, flash attention the prompts' default (0477dce: where the adapter has matrix
# units, not over an f32 cache): every test binary that runs prompts or steps on the
# default route (the tests that need the default model skipped: the device has no
# network), then pp512 / pp2048 / tg32 of the 8B and SmolLM2 shapes with flash (the
# default) and without (--matrix-attention false), alternated twice, and --parallel
# 1,8,32. Run from the checkout's root with carry [.gl, .bin/$BIN, .anchors] where
# .bin/$BIN holds compare, prefill_test, families_test, long_context_test, engine_test,
# attention_test, plan_test, session_test (xz). With LLAMA=1 it also builds llama.cpp's
# CUDA backend in the background first (../shared/anchors/build-on-device.sh, about
# 4 minutes) and runs llama-bench on the same files. PHASES (default "tests pp") picks
# the parts, to keep one call within the device's 600 s; "columns" (matvec_bench.xz
# too) measures issue 42's columns at once; "llama" runs llama-bench on the files the
# pp phase wrote (the build, started by the first call with LLAMA=1, must have ended).
set -u
phase() { [[ " ${PHASES:-tests pp} " == *" $1 "* ]]; }
BIN=${BIN:-flash6}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=${BRASS_CACHE:-/tmp/bc} BRASS_ADAPTER=NVIDIA
mkdir -p /work && ln -sfn "$PWD" /work/main
if [ "${LLAMA:-0}" = 1 ] && [ ! -e /tmp/anchors/started ]; then
    mkdir -p /tmp/anchors && touch /tmp/anchors/started
    (setsid nohup bash .anchors/build-on-device.sh cuda >/tmp/anchors/build.log 2>&1 &)
fi
tests="prefill_test families_test long_context_test engine_test attention_test plan_test session_test"
for b in compare $tests; do
    xz -dc ".bin/$BIN/$b.xz" >"/tmp/$b"; chmod +x "/tmp/$b"; done
skip="--skip default_model --skip prompt_logits_leave_the_greedy_tokens_unchanged"
phase tests && for t in $tests; do
    timeout 200 "/tmp/$t" $skip >"$OUT/$t.log" 2>&1
    echo "$t exited $?" | tee -a "$OUT/$t.log"
done
phase tests && grep -hE "test result|FAILED|panicked" "$OUT"/*_test.log | head -30
phase tests && grep -hE "route in batches|float model|worst top-5" "$OUT"/*_test.log | cut -c1-170 | head -30
phase pp && for round in 1 2; do
  for s in llama3-8b smollm2-135m; do
    for flash in default false; do
      extra=""; [ $flash = false ] && extra="--matrix-attention false"
      timeout 90 /tmp/compare --adapter NVIDIA --synthetic $s --skip-matvec --pp 512,2048 -n 32 $extra 2>&1 |
        grep -E "prompt of|decode at" | sed "s/^/round $round flash=$flash $s: /" |
        tee -a "$OUT/pp.log" | cut -c1-170
    done
  done
done
phase pp && timeout 150 /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
  --parallel 1,8,32 --parallel-prompt 128 -o "$OUT/parallel.json" >"$OUT/parallel.log" 2>&1
phase pp && echo "parallel exited $?" >>"$OUT/parallel.log"
phase pp && grep -E "sequences:|exited" "$OUT/parallel.log" | cut -c1-170
# Issue 42: a step's rows dotted 8 at a time with each loaded weight slice (x in place),
# the matvecs alone (8 columns, then 1) and end to end.
if phase columns; then
  xz -dc ".bin/$BIN/matvec_bench.xz" >/tmp/matvec_bench; chmod +x /tmp/matvec_bench
  for c in 8 1; do
    for at_once in "" "--columns-at-once 8"; do
      timeout 120 /tmp/matvec_bench --kernels q4_k_dot4,q5_k_dot4,q6_k_dot4 --types q4_k,q5_k,q6_k \
        --shapes llama3-8b --x-direct --cols $c $at_once 2>&1 | grep -E "llama3" |
        sed "s/^/cols $c $at_once: /" | tee -a "$OUT/columns_bench.log" | cut -c1-190
    done
  done
  # --columns-at-once 1: x in place, one column at a time (the same x forms as 8).
  for at_once in 1 8; do
    timeout 150 /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
      --parallel 1,8,16 --parallel-prompt 128 --columns-at-once $at_once \
      >>"$OUT/parallel_columns.log" 2>&1
    echo "parallel $at_once exited $?" >>"$OUT/parallel_columns.log"
  done
  grep -E "sequences:|exited" "$OUT/parallel_columns.log" | cut -c1-170
fi
if phase llama; then
  for i in $(seq 60); do [ -x /tmp/anchors/build-cuda/bin/llama-bench ] && break; sleep 5; done
  for f in "$BRASS_CACHE"/synthetic/*.gguf; do
    timeout 200 /tmp/anchors/build-cuda/bin/llama-bench -m "$f" -ngl 99 -fa 1 -r 3 -p 512,2048 -n 32 2>&1 |
      tee -a "$OUT/llama.log" | grep -E "pp|tg" | cut -c1-170
  done
fi
