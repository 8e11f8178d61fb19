#!/bin/bash
# Second lease: with wgpu's clamps gone from the matrix kernels (IndexChecks::Kernel),
# does the vectorized staging that lost under them (results/prefill/staging/
# vectorized_staging.patch, 0.70-0.74x) win now? Binaries: .bin/ic2 (HEAD) and
# .bin/vec (HEAD + the patch), alternated. Then HEAD's many-sequence defaults.
# carry [.gl, .bin/ic2, .bin/vec].
set -u
source results/lease_setup.sh
for b in ic2 vec; do unpack_bin "$b" "/tmp/$b"; done
(timeout 200 /tmp/ic2/compare --synthetic llama3-8b --skip-matvec --pp 64 -n 1 >/dev/null 2>&1 &)
for t in matmul_test prefill_test; do
    timeout 100 "/tmp/vec/$t" --skip default_model >"$OUT/vec_$t.log" 2>&1
    echo "vec $t exited $? ($(grep -E '^test result' "$OUT/vec_$t.log" | tail -1))"
done
for b in ic2 vec ic2 vec; do
    blocks=(); [ $b = vec ] && blocks=(--coop-token-blocks 2,4)
    timeout 100 /tmp/$b/matmul_bench --shapes llama3-8b --types q4_k,q6_k --kernels dot4 \
        --matrices attn_q,ffn_up,ffn_down --tokens 512,2048 --unpacked none --columns 2:2:4 \
        --iters 5 "${blocks[@]}" 2>&1 | grep -E "coopmat|columns" | sed "s/^/$b /" |
        tee -a "$OUT/matmul_bench.log" | cut -c1-150
done
for b in ic2 vec ic2 vec; do
    timeout 100 /tmp/$b/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 32 2>&1 |
        grep -E "prompt of|decode at" | sed "s/^/$b /" | tee -a "$OUT/pp.log" | cut -c1-150
done
timeout 150 /tmp/ic2/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
    --parallel 1,8,16,32 --parallel-prompt 128 >"$OUT/parallel.log" 2>&1
grep -E "together" "$OUT/parallel.log" | cut -c1-150
