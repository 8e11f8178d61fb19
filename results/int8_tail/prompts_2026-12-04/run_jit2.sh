#!/bin/bash
cd /work/main
T=./target/release/examples/int8_tail
one() { local name=$1; shift
  $T "$@" -n 24 --no-gpu --no-cpu --no-points --mask 31 --jitter-seeds 5 --errors-dir /tmp/i22/jit_$name > /tmp/i22/${name}_jit.txt 2>&1; echo $name; }
grep -E "^one ($1)" /tmp/i22/prompt_args.sh > /tmp/i22/pa_$2.sh; source /tmp/i22/pa_$2.sh
