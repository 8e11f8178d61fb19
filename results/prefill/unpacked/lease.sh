#!/bin/bash
# H200 lease for the unpacked matmul (issue 41, item 2; issue 42's steps of many rows):
# its kernels' tests and the matrix-unit prompt routes end to end on real matrix units,
# the matmul bench (tiled coopmat against the unpacked kernel's three steps, apart and
# summed, at 512 and 2,048 tokens, in five tiles; and at 32 beside the decode columns),
# then pp512 /
# pp2048 of the 8B and SmolLM2 shapes with --unpacked-matmul true and false (same
# binary, alternated). Run from the checkout's root with carry [.gl, .bin/$BIN]
# (compare, matmul_test, matmul_bench, prefill_test, engine_test, stripped and xz'd),
# in two calls of the device tool (each under its 10 minutes): `bash lease.sh kernels`
# (tests and benches, about 7 minutes), then `bash lease.sh prompts` (about 6).
set -u
BIN=${BIN:-unpacked1}
PART=${1:-kernels}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=${BRASS_CACHE:-/tmp/bc} BRASS_ADAPTER=NVIDIA
mkdir -p /work && ln -sfn "$PWD" /work/main
for b in compare matmul_test matmul_bench prefill_test engine_test; do
    xz -dc ".bin/$BIN/$b.xz" >"/tmp/$b"; chmod +x "/tmp/$b"; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt"
if [ "$PART" = kernels ]; then
# The 8B file is written once (4.9 GB) while the tests run.
(timeout 200 /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 64 -n 1 \
    >"$OUT/synth.log" 2>&1 &)
timeout 150 /tmp/matmul_test --nocapture >"$OUT/matmul_test.log" 2>&1
echo "matmul tests exited $?" | tee -a "$OUT/matmul_test.log"
timeout 120 /tmp/prefill_test --nocapture unpacked matrix_unit >"$OUT/prefill_units_test.log" 2>&1
echo "prefill tests on the matrix units exited $?" | tee -a "$OUT/prefill_units_test.log"
timeout 60 /tmp/engine_test --nocapture steps_of_many_rows >"$OUT/engine_test.log" 2>&1
echo "engine test exited $?" | tee -a "$OUT/engine_test.log"
grep -E "test result|FAILED|panicked|worst|largest" "$OUT"/*_test.log | head -20
timeout 240 /tmp/matmul_bench --adapter NVIDIA --shapes llama3-8b --types q4_k,q6_k --kernels dot4 \
    --matrices attn_q,attn_k,ffn_up,ffn_down --tokens 512,2048 --unpacked 2:1,2:0,4:1,2:1:4,4:1:4 \
    --iters 5 --json "$OUT/matmul_bench.json" >"$OUT/matmul_bench.log" 2>&1
echo "matmul bench exited $?" >>"$OUT/matmul_bench.log"
grep -E "probe|unpacked|coopmat" "$OUT/matmul_bench.log" | cut -c1-150 | head -80
timeout 60 /tmp/matmul_bench --adapter NVIDIA --shapes llama3-8b --types q4_k --kernels dot4 \
    --matrices attn_q,ffn_up,ffn_down --tokens 32 --unpacked 2:1,4:1,8:1 --columns 2:2:4 \
    --iters 5 >"$OUT/matmul_bench_32.log" 2>&1
echo "matmul bench (32 tokens) exited $?" >>"$OUT/matmul_bench_32.log"
grep -E "llama3" "$OUT/matmul_bench_32.log" | cut -c1-150
else
# The 8B shape alternated twice, SmolLM2's once.
for run in "true llama3-8b" "false llama3-8b" "true smollm2-135m" "false smollm2-135m" \
    "true llama3-8b" "false llama3-8b"; do
  set -- $run
  timeout 90 /tmp/compare --adapter NVIDIA --synthetic $2 --skip-matvec --pp 512,2048 -n 8 \
    --unpacked-matmul $1 2>&1 | grep -E "prompt of|decode at" | sed "s/^/unpacked $1 $2: /" |
    tee -a "$OUT/pp.log" | sed 's/ (batches.*//'
done
# Batches of 2,048 (issue 41, item 3): the weights unpacked once for four times the
# tokens.
for u in true false; do
  timeout 90 /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 2048 -n 4 \
    --ubatch 2048 --unpacked-matmul $u 2>&1 | grep -E "prompt of" |
    sed "s/^/ubatch 2048 unpacked $u: /" | tee -a "$OUT/pp.log" | sed 's/ (batches.*//'
done
# Many sequences (issue 42), as results/parallel measured them: the steps of 32 rows
# on the decode columns, then unpacked (the prompts of both runs unpacked or not alike).
for u in false true; do
  timeout 120 /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
    --parallel 1,8,32 --parallel-prompt 128 --unpacked-matmul $u -o "$OUT/parallel_$u.json" \
    >"$OUT/parallel_$u.log" 2>&1
  echo "parallel (unpacked $u) exited $?" >>"$OUT/parallel_$u.log"
  grep -E "sequences:|decode at|exited" "$OUT/parallel_$u.log" | cut -c1-160 | sed "s/^/unpacked $u: /"
done
fi
