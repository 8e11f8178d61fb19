#!/bin/bash
# Where the narrow decode columns overtake the column matvec: the same build (.bin/tt)
# at 10, 11 and 12 sequences on the column matvec (the default crossover, 14) and on
# the matrix units (--decode-units-from 10). Carry .gl .bin/tt.
source results/lease_setup.sh
unpack_bin tt /tmp/sets/tt; tt=/tmp/sets/tt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.log
parallel_8b $tt matvec --parallel 10,11,12
parallel_8b $tt units --parallel 10,11,12 --decode-units-from 10
echo "== done at ${SECONDS}s"
