#!/bin/bash
# Decode with this stop's build (.bin/fr) against 6104bf1's (.bin/head, before q in
# matrices, batches of 2,048 and the look-ahead), alternated, 8B and SmolLM2 shapes;
# then fr's decode of 1 / 8 / 32 sequences at once. Carry .gl .bin/head .bin/fr.
source results/lease_setup.sh
unpack_bin head /tmp/sets/head; unpack_bin fr /tmp/sets/fr
head=/tmp/sets/head; fr=/tmp/sets/fr
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.log
for s in llama3-8b smollm2-135m; do
    for b in head fr head fr; do
        timeout 60 ${!b}/compare --synthetic $s --skip-matvec --pp 0 -n 128 2>&1 |
            grep -E "decode at depth" | sed "s/^/$b $s /" | tee -a $OUT/tg.log | cut -c1-150
    done
done
timeout 150 $fr/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 --parallel 1,8,32 \
    --parallel-prompt 128 2>&1 | grep -E "sequences|one pass" | tee $OUT/parallel.log | cut -c1-200
echo "== done at ${SECONDS}s"
