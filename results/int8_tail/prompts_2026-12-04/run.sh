#!/bin/bash
# usage: run.sh  (runs every prompt; France via the f64 reference)
cd /work/main
M=/root/.cache/brass/SmolLM2-135M-Instruct.Q4_1.gguf
T=./target/release/examples/int8_tail
export XDG_RUNTIME_DIR=/tmp LP_NATIVE_VECTOR_WIDTH=256 BRASS_EXPECT_SUBGROUP=8 MESA_SHADER_CACHE_DIR=/tmp/mesa-cache-8
one() { # name, args...
  local name=$1; shift
  $T "$@" -n 24 --no-gpu --no-cpu --no-points --write-ids /tmp/i22/$name.ids > /dev/null 2>&1
  /work/llamacpp/llamacpp_logits $M /tmp/i22/$name.ids /tmp/i22/$name.f32 1 > /dev/null 2>&1
  nice $T "$@" -n 24 --no-cpu --no-points --jitter-seeds 0 --gpu default --llamacpp-logits /tmp/i22/$name.f32 --errors-dir /tmp/i22/err_$name > /tmp/i22/$name.txt 2>&1
  echo "$name done"
}
one france --reference tests/reference/smollm2_q4_1_f64.json --llamacpp tests/reference/smollm2_q4_1_llamacpp.json
python3 - <<'PY' > /tmp/i22/prompt_args.sh
exec(open('/tmp/i22/prompts.py').read())
import shlex
for k,v in prompts.items():
    print(f"one {k} --prompt {shlex.quote(v)}")
PY
source /tmp/i22/prompt_args.sh
