#!/bin/bash
# The decode columns' kernel alone, per tile and fetch depth, 8B shapes at 8, 16 and
# 32 tokens, and the driver's register counts for each depth. Carry .gl .bin/cf2.
source results/lease_setup.sh
unpack_bin cf2 /tmp/sets/cf2; cf2=/tmp/sets/cf2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.log
timeout 60 $cf2/pipeline_stats --types q4_k --m 4096 --k 4096 --x-q8 --matmul \
    >$OUT/pipeline_stats.txt 2>&1
grep -A2 "columns" $OUT/pipeline_stats.txt | grep -E "columns|none" | cut -c1-150
timeout 400 $cf2/matmul_bench --shapes llama3-8b --types q4_k --tokens 8,16,32 \
    --kernels columns --unpacked none --iters 20 \
    --columns 2:2:4:0,2:2:4:1,2:2:4:2,2:2:4:4,2:1:4:0,2:1:4:1,2:1:4:2,1:1:8:0,1:1:8:1,1:2:8:0,1:2:8:1,4:2:4:0,4:2:4:1 \
    >$OUT/columns_bench.log 2>&1
grep -E "columns" $OUT/columns_bench.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17}' | cut -c1-160 | head -150
echo "== done at ${SECONDS}s"
