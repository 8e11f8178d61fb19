#!/bin/bash
# results/parallel/vec4_staging/build_set.sh SET: compare, matmul_test, engine_test and matmul_bench, stripped and xz'd into .bin/SET (run from the checkout's root)
set -eu
out=.bin/$1; mkdir -p $out
cargo build --release --example compare
pack() { strip -o "/tmp/$2" "$1" && xz -T2 -6 -c "/tmp/$2" >"$out/$2.xz"; }
built() { grep -E "Executable $1 " | tail -1 | sed -E 's/.*\((.*)\)/\1/'; }
pack target/release/examples/compare compare
b=$(cargo bench --no-run --bench matmul 2>&1)
pack "$(built benches/matmul.rs <<<"$b")" matmul_bench
t=$(cargo test --release --no-run --test matmul --test engine 2>&1)
pack "$(built tests/matmul.rs <<<"$t")" matmul_test
pack "$(built tests/engine.rs <<<"$t")" engine_test
ls -la $out
