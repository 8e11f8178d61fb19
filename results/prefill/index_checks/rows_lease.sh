#!/bin/bash
# Third lease: prompts' coopmat tiles of 64 rows (2 row blocks a subgroup, half the
# accumulators) against 128 (4, the default), same binaries, alternated; built with
# row_blocks.patch applied (not landed). carry [.gl, .bin/rb].
set -u
source results/lease_setup.sh
unpack_bin rb /tmp/rb
(timeout 120 /tmp/rb/compare --synthetic llama3-8b --skip-matvec --pp 64 -n 1 >/dev/null 2>&1 &)
timeout 60 /tmp/rb/matmul_test --skip default_model >"$OUT/matmul_test.log" 2>&1
echo "matmul_test exited $? ($(grep -E '^test result' "$OUT/matmul_test.log" | tail -1))"
timeout 90 /tmp/rb/matmul_bench --shapes llama3-8b --types q4_k,q6_k --kernels dot4 \
    --matrices attn_q,attn_k,ffn_up,ffn_down --tokens 512,2048 --unpacked none \
    --coop-row-blocks 4,2 --iters 5 2>&1 | grep -E "coopmat" | tee "$OUT/matmul_bench.log" | cut -c1-150
for r in 2 4 2 4; do
    timeout 60 /tmp/rb/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 8 \
        --coop-row-blocks $r 2>&1 | grep -E "prompt of" | sed "s/^/rows=$r /" |
        tee -a "$OUT/pp.log" | cut -c1-120
done
for r in 2 4; do
    timeout 40 /tmp/rb/compare --synthetic smollm2-135m --skip-matvec --pp 512,2048 -n 8 \
        --coop-row-blocks $r 2>&1 | grep -E "prompt of" | sed "s/^/rows=$r /" |
        tee -a "$OUT/pp_smollm2.log" | cut -c1-120
done
