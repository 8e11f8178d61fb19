#!/bin/bash
# Not yet run: the next lease for issue 41, from what this stop's leases left open
# (README.md). Binaries from HEAD: compare, attention_bench, matmul_test (stripped,
# xz'd) in .bin/$BIN; carry [.gl, .anchors, .bin/$BIN].
#  0. the matrix-unit matmuls with and without wgpu's clamps, bit for bit, on the units;
#  1. flash attention without the clamps: one layer at 512 / 2,048 / 8,192 tokens, in
#     TFLOP/s and % of the matrix probe (last measured clamped: 2.4 % at 2,048);
#  2. the few-tiles rule (Tuning::coop_min_workgroups, 64, measured with the clamps):
#     attn_k and attn_v, 32 tiles at 512 tokens, go to dot4; --coop-matrix true puts
#     every matrix on the matrix units;
#  3. the prompts and decode with llama.cpp CUDA beside them, on an H200 if lent.
set -u
BIN=${BIN:-next}
source results/lease_setup.sh
unpack_bin "$BIN" /tmp
(setsid nohup bash .anchors/build-on-device.sh cuda >/tmp/llama_build.log 2>&1 &)
(timeout 200 /tmp/compare --synthetic llama3-8b --skip-matvec --pp 64 -n 1 >/dev/null 2>&1 &)
timeout 60 /tmp/matmul_test matrix_unit_matmuls >"$OUT/matmul_test.log" 2>&1
echo "matmul_test exited $? ($(grep -E '^test result' "$OUT/matmul_test.log" | tail -1))"
timeout 150 /tmp/attention_bench --shapes llama3-8b,smollm2 --kv f16 --no-decode \
    --prefill-tokens 512,2048,8192 --iters 3 2>&1 | tee "$OUT/attention_bench.log" | tail -12
for c in default true default true; do
    coop=(); [ $c = true ] && coop=(--coop-matrix true)
    timeout 90 /tmp/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 32 "${coop[@]}" \
        2>&1 | grep -E "prompt of|decode at" | sed "s/^/coop=$c /" | tee -a "$OUT/pp.log" | cut -c1-150
done
for i in $(seq 60); do [ -x /tmp/anchors/build-cuda/bin/llama-bench ] && break; sleep 5; done
for f in "$BRASS_CACHE"/synthetic/*.gguf; do
    timeout 200 /tmp/anchors/build-cuda/bin/llama-bench -m "$f" -ngl 99 -fa 1 -r 3 \
        -p 512,2048 -n 32 2>&1 | tee -a "$OUT/llama.log" | grep -E "pp|tg" | cut -c1-170
done
