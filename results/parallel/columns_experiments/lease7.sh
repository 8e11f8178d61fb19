#!/bin/bash
# The matrix units' staging without int -> float conversion instructions (`mg`: the
# quants converted to f32 by adding them to 1.5 * 2^23's bits, exactly, so the same
# bits as before) against the build before (`base`, 0a6ab88), alternated in one lease.
# PHASES: stats (the driver's figures for both), tests (the matmul tests on the matrix
# units), kernels (the prompt matmuls alone; the columns line times nothing, as the
# bench runs the decode columns only where --columns names them), parallel (decode of
# 16 and 32 sequences), pp (prompts), spans (the decode columns in K spans,
# columns.wgsl's K_SPANS, by row blocks and tile: `sp`, 1716794's bench). The first call
# ran them all (h100_2026-12-06_conversions; the prompt and spans logs did not come
# back, too many files); the second the spans phase alone, as below
# (h100_2026-12-06_k_spans). Carry .gl .bin/base .bin/mg .bin/sp.
source results/lease_setup.sh
SETS="base mg"
for s in $SETS sp; do unpack_bin $s /tmp/sets/$s; declare "$s=/tmp/sets/$s"; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.log
start_synth $base/compare llama3-8b
for phase in ${PHASES:-stats tests kernels spans parallel pp}; do
    echo "== $phase at ${SECONDS}s"
    case $phase in
    stats)
        for b in $SETS; do
            timeout 60 ${!b}/pipeline_stats --types q4_k,q6_k --m 4096 --k 4096 --x-q8 --matmul \
                --flavours none >$OUT/pipeline_stats_$b.txt 2>&1
            grep -A1 -E "coopmat|columns" $OUT/pipeline_stats_$b.txt | sed "s/^/$b /" | cut -c1-160
        done ;;
    tests)
        for b in mg; do
            timeout 100 ${!b}/matmul_test 2>&1 | grep -E "^test |test result|panicked|within" |
                tee $OUT/matmul_test_$b.log | tail -1 | sed "s/^/$b /"
        done ;;
    kernels)
        for b in $SETS; do
            timeout 100 ${!b}/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 16,32 \
                --kernels columns --unpacked none --iters 20 >$OUT/columns_bench_$b.log 2>&1
            grep -E "columns" $OUT/columns_bench_$b.log | awk -v b=$b '{print b,$2,$3,$(NF-6),$(NF-5),$NF}'
        done
        for b in $SETS; do
            timeout 100 ${!b}/matmul_bench --shapes llama3-8b --types q4_k --tokens 512,2048 \
                --kernels coopmat --unpacked none --iters 10 >$OUT/prompt_bench_$b.log 2>&1
            grep -E "coopmat" $OUT/prompt_bench_$b.log | awk -v b=$b '{print b,$2,$3,$(NF-6),$(NF-5),$NF}'
        done ;;
    parallel)
        wait_synth
        for b in ${PAR_ORDER:-mg base mg base}; do parallel_8b ${!b} $b --parallel 16,32; done ;;
    spans)
        timeout 200 $sp/matmul_bench --shapes llama3-8b --types q4_k --tokens 8,16,32 \
            --kernels columns --unpacked none --iters 20 \
            --matrices attn_q,attn_k,ffn_up,ffn_down \
            --columns 2:1:4,2:1:4:2,2:1:4:4,2:2:4,2:2:4:2,2:2:4:4,4:1:4,4:1:4:2,4:1:4:4,4:2:4,4:2:4:2,4:2:4:4 \
            >$OUT/spans_bench.log 2>&1 ;;
    pp)
        wait_synth
        for b in ${PP_ORDER:-base mg base mg}; do
            timeout 100 ${!b}/compare --synthetic llama3-8b --skip-matvec --pp 512,2048 -n 1 2>&1 |
                grep -E "prompt of" | sed "s/^/$b /" | tee -a $OUT/pp.log | cut -c1-200
        done ;;
    esac
done
echo "== done at ${SECONDS}s"
