#!/bin/bash
# Issue 42: what a decode-columns round spends its time on, by taking parts of it away
# (ablate.patch: BRASS_ABLATE bits 1 the multiplies, 2 the weights' loads, 4 x's loads,
# 8 the staging whole, 16 the round's two barriers; the results are wrong, the times
# tell). Q4_K, the narrow tile at 16 tokens and the wide one at 32, on matrices of 64
# workgroups or fewer (one a multiprocessor) and of 224-448.
# Carry .gl .bin/ab.
source results/lease_setup.sh
unpack_bin ab /tmp/ab
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for a in 0 1 2 4 6 8 9 16 17 24 25 0; do
    BRASS_ABLATE=$a timeout 40 /tmp/ab/matmul_bench --shapes llama3-8b --types q4_k \
        --tokens 16,32 --kernels columns --unpacked none --iters 20 \
        --matrices attn_q,attn_k,ffn_up,ffn_down --columns 2:1:4:1,2:1:4:2,4:2:4:1:4 \
        >/tmp/ablate_$a.log 2>&1
    grep -E "columns" /tmp/ablate_$a.log | tr -s ' ' |
        sed -E "s/^/$a /; s/matmul.q4_k_columns 16x16 f16 wg256 k_groups4 //" | cut -c1-110
done | tee $OUT/ablate.txt
echo "== done at ${SECONDS}s"
