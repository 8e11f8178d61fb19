#!/bin/bash
# Which case of the columns-at-once bit test fails on the H100: the landed test binary
# (14fd9c0) and the patched one (rows_at_once.patch). Carry .gl .bin/diag.
source results/lease_setup.sh
unpack_bin diag /tmp/d
for b in head ra; do
  echo "== $b"
  /tmp/d/matvec_test_$b dot4_columns_at_once 2>&1 | grep -E "^test |panicked|failed:|NMSE" | cut -c1-260 | head -8
done 2>&1 | tee $OUT/diag.log
