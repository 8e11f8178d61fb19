#!/bin/bash
# Builds the binaries a lease carries, here (the device has no Rust): compare,
# profile_step, the matmul and attention benches, and the matmul, attention and prefill
# tests, stripped and xz'd into .bin/$1 (an ignored folder; a lease names it in `carry`,
# and results/lease_setup.sh's unpack_bin unpacks it there). Run from the checkout's
# root (test binaries look for tests/reference under the path they were built at, which
# lease_setup.sh links as /work/main).
set -eu
set_name=${1:?usage: results/build_lease_bins.sh SET}
out=.bin/$set_name
mkdir -p "$out"
cargo build --release --example compare --example profile_step
pack() { strip -o "/tmp/$2" "$1" && xz -T2 -6 -c "/tmp/$2" >"$out/$2.xz"; }
pack target/release/examples/compare compare
pack target/release/examples/profile_step profile_step
# The last "Executable" line cargo prints for a target is the binary it just built.
built() { grep -E "Executable $1 " | tail -1 | sed -E 's/.*\((.*)\)/\1/'; }
benches=$(cargo bench --no-run --bench matmul --bench attention 2>&1)
pack "$(built benches/matmul.rs <<<"$benches")" matmul_bench
pack "$(built benches/attention.rs <<<"$benches")" attention_bench
tests=$(cargo test --release --no-run --test matmul --test attention --test prefill 2>&1)
for t in matmul attention prefill; do
    pack "$(built "tests/$t.rs" <<<"$tests")" "${t}_test"
done
ls -la "$out"
