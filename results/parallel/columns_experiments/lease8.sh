#!/bin/bash
# Issue 42: the decode columns in K spans through the model (`compare
# --decode-column-spans`), 16 and 32 sequences, against one span; the engine's
# span test on the H100's matrix units. Carry .gl .bin/ks.
source results/lease_setup.sh
unpack_bin ks /tmp/ks
B=/tmp/ks
start_synth $B/compare llama3-8b
$B/engine_test steps_in 2>&1 | grep -E "^test |result|panicked" | tee $OUT/engine_test.log
wait_synth
for n in 16 32; do
  parallel_8b $B base --parallel $n
  parallel_8b $B sp2 --parallel $n --decode-column-spans 2
done
parallel_8b $B sp4 --parallel 32 --decode-column-spans 4
