#!/bin/bash
# Issue 42, after lease.sh (four values a store: +1.6 % at 32 sequences, rounds hardly
# shorter): what bounds a decode-columns round. The driver's registers and shared
# memory for the plan's tiles and for other K steps (pipeline_stats), and the columns
# by K step (groups of 32 a round: 2, 4, 8) and tile, Q4_K, on v4's build.
# Carry .gl .bin/v4 .bin/ps.
source results/lease_setup.sh
unpack_bin v4 /tmp/v4; unpack_bin ps /tmp/v4
B=/tmp/v4
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
timeout 100 $B/pipeline_stats --types q4_k,q6_k --m 14336 --k 4096 --x-q8 --matmul \
    --flavours none --decode-tiles 2:1:4,4:2:4:4,4:2:4,2:2:4,2:1:8,2:1:2,4:2:2:4,1:1:4,1:1:8 \
    >$OUT/pipeline_stats.txt 2>&1
grep -B1 "Register" $OUT/pipeline_stats.txt | grep -v "^--" | paste - - | sed -E 's/Binary.*(Shared Memory Size [0-9]+).*/\1/' | cut -c1-200
timeout 200 $B/matmul_bench --shapes llama3-8b --types q4_k --tokens 16,32 --kernels columns \
    --unpacked none --iters 20 --matrices attn_q,ffn_up,ffn_down \
    --columns 2:1:2:2,2:1:4:2,2:1:8:2,2:1:8:1,1:1:8:2,4:2:2:2:4,4:2:4:2:4,4:2:4:1:4,2:2:4:2 \
    >$OUT/columns_k_groups.log 2>&1
grep -E "columns" $OUT/columns_k_groups.log | tr -s ' ' | sed -E 's/matmul.q4_k_columns 16x16 f16 wg256 //' | cut -c1-120
echo "== done at ${SECONDS}s"
