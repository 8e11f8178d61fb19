#!/bin/bash
# H200 lease for prefill attention on the matrix units (issue 41): the matrix kernel's
# whole test (it runs only where there are matrix units), the prompt and family tests
# end to end with it, the attention bench (scalar and matrix kernels at 512 / 2,048 /
# 8,192 tokens, and the matrix kernel at other tiles), pp512 / pp2048 / tg32 of the 8B
# and SmolLM2 shapes with the matrix attention asked for and not (same binary,
# alternated), pp2048 of the 8B shape in batches of 1,024 and 2,048 (issue 41, item 3),
# and llama.cpp CUDA's `llama-bench -fa 1 -p 512,2048 -n 32` on the same files, built
# while brass measures. Also the kernel without matrix units, register-tiled since
# 9a82cb6, against the one before it (.bin/$OLD, 7863e89): the attention bench and
# pp512 / pp2048 with --matrix-attention false, old and new binaries alternated, and
# the new one at other tiles (--scalar-tiles: H200 has 48 KB of workgroup memory, the
# router allows itself 32). Run
# from the checkout's root with carry [.gl, .anchors, .bin/$BIN, .bin/$OLD] (compare,
# attention_test, prefill_test, families_test, attention_bench, stripped and xz'd). The prompt and family tests take the default
# route, which is the scalar kernel until this test passes; run them with the default
# flipped to exercise the matrix kernel end to end.
set -u
BIN=${BIN:-flash4}
OLD=${OLD:-flash3}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=/tmp/bc BRASS_ADAPTER=NVIDIA
mkdir -p /work && ln -sfn "$PWD" /work/main
# llama.cpp CUDA builds on the host's cores while brass measures (brass's GPU work is
# unaffected; its host recording shares the cores with the build).
(setsid nohup bash .anchors/build-on-device.sh cuda >"$OUT/llama_build.log" 2>&1 &)
for b in compare attention_test prefill_test families_test attention_bench; do
    xz -dc ".bin/$BIN/$b.xz" >"/tmp/$b"; chmod +x "/tmp/$b"; done
for b in compare attention_bench; do
    xz -dc ".bin/$OLD/$b.xz" >"/tmp/${b}_old"; chmod +x "/tmp/${b}_old"; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt"
timeout 240 /tmp/attention_test prefill_attention_on_matrix_units --nocapture >"$OUT/attention_flash_test.log" 2>&1
rc=$?; echo "flash test exited $rc" | tee -a "$OUT/attention_flash_test.log"; tail -3 "$OUT/attention_flash_test.log"
timeout 200 /tmp/attention_bench --shapes llama3-8b,smollm2 --no-decode --prefill-tokens 512,2048,8192 --flash-tiles 64:32,32:64,32:32,16:64,16:128 --scalar-tiles 32:32:32,32:32:16,64:32:16,64:16:32,16:32:32 >"$OUT/attention_bench.log" 2>&1
echo "bench exited $?" >>"$OUT/attention_bench.log"; grep -E "llama3|smollm2|probe" "$OUT/attention_bench.log" | cut -c1-220
timeout 120 /tmp/attention_bench_old --shapes llama3-8b,smollm2 --no-decode --prefill-tokens 512,2048,8192 >"$OUT/attention_bench_old.log" 2>&1
echo "old bench exited $?" >>"$OUT/attention_bench_old.log"; grep -E "prefill_f16" "$OUT/attention_bench_old.log" | cut -c1-220
for round in 1 2; do for b in compare_old compare; do
  timeout 90 /tmp/$b --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 4 \
    --matrix-attention false 2>&1 | grep -E "prompt of" | sed "s/^/$b scalar: /" |
    tee -a "$OUT/pp_scalar.log" | sed 's/ (batches.*//'
done; done
for round in 1 2; do for m in true false; do
  for s in llama3-8b smollm2-135m; do
    timeout 90 /tmp/compare --adapter NVIDIA --synthetic $s --skip-matvec --pp 512,2048 -n 32 \
      --matrix-attention $m 2>&1 | grep -E "prompt of|decode at" | sed "s/^/matrix-attention $m $s: /" |
      tee -a "$OUT/pp.log" | sed 's/ (batches.*//'
  done; done; done
for ub in 1024 2048; do
  timeout 90 /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 2048 -n 4 \
    --ubatch $ub --matrix-attention true 2>&1 | grep -E "prompt of" | sed "s/^/ubatch $ub: /" |
    tee -a "$OUT/ubatch.log" | sed 's/ (batches.*//'
done
timeout 150 /tmp/prefill_test --skip default_model >"$OUT/prefill_test.log" 2>&1; echo "prefill tests exited $?" | tee -a "$OUT/prefill_test.log"
timeout 150 /tmp/families_test >"$OUT/families_test.log" 2>&1; echo "families tests exited $?" | tee -a "$OUT/families_test.log"
timeout 100 /tmp/attention_test >"$OUT/attention_test.log" 2>&1; echo "attention tests exited $?" | tee -a "$OUT/attention_test.log"
grep -E "test result|FAILED|panicked" "$OUT"/*_test.log | head -20
for _ in $(seq 1 100); do grep -q "^built" "$OUT/llama_build.log" && break; sleep 3; done
tail -2 "$OUT/llama_build.log"
for f in /tmp/bc/synthetic/*.gguf; do
  timeout 200 /tmp/anchors/build-cuda/bin/llama-bench -m "$f" -ngl 99 -fa 1 -r 3 -p 512,2048 -n 32 \
    2>&1 | tee -a "$OUT/llama_cuda.md" | grep -E "pp|tg"
done
