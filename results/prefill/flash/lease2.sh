#!/bin/bash
# H200, after flash attention became the prompts' default where the adapter has matrix
# units (8e1bd6e): the prompt, family and long-context tests on the default route (the
# tests that need the default model skipped: the device has no network), pp512 / pp2048
# / tg32 of the 8B and SmolLM2 shapes on the default route, the 8B shape with the
# unpacked matmuls asked for, and --parallel 1,8,32 (issue 42, whose decode rows the
# forward pass now routes through Pass::rows_on_units). Run from the checkout's root
# with carry [.gl, .bin/$BIN] (compare, prefill_test, families_test, long_context_test).
set -u
BIN=${BIN:-flash5}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=${BRASS_CACHE:-/tmp/bc} BRASS_ADAPTER=NVIDIA
mkdir -p /work && ln -sfn "$PWD" /work/main
for b in compare prefill_test families_test long_context_test; do
    xz -dc ".bin/$BIN/$b.xz" >"/tmp/$b"; chmod +x "/tmp/$b"; done
timeout 150 /tmp/prefill_test --skip default_model --skip prompt_logits_leave_the_greedy_tokens_unchanged \
    >"$OUT/prefill_test.log" 2>&1; echo "prefill tests exited $?" | tee -a "$OUT/prefill_test.log"
timeout 120 /tmp/families_test >"$OUT/families_test.log" 2>&1; echo "families tests exited $?" | tee -a "$OUT/families_test.log"
timeout 120 /tmp/long_context_test >"$OUT/long_context_test.log" 2>&1; echo "long-context tests exited $?" | tee -a "$OUT/long_context_test.log"
grep -E "test result|FAILED|panicked" "$OUT"/*_test.log | head -20
for s in llama3-8b smollm2-135m; do
  timeout 90 /tmp/compare --adapter NVIDIA --synthetic $s --skip-matvec --pp 512,2048 -n 32 2>&1 |
    grep -E "prompt of|decode at" | sed "s/^/default $s: /" | tee -a "$OUT/pp.log" | cut -c1-170
done
timeout 90 /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 4 \
  --unpacked-matmul true 2>&1 | grep -E "prompt of" | sed "s/^/unpacked true llama3-8b: /" |
  tee -a "$OUT/pp.log" | cut -c1-170
timeout 150 /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
  --parallel 1,8,32 --parallel-prompt 128 -o "$OUT/parallel.json" >"$OUT/parallel.log" 2>&1
echo "parallel exited $?" >>"$OUT/parallel.log"
grep -E "sequences:|exited" "$OUT/parallel.log" | cut -c1-170
