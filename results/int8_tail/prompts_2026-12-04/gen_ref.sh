#!/bin/bash
# Writes tests/reference/smollm2_q4_1_prompts.json's sequences (one JSON each), then joins them.
cd /work/main
T=./target/release/examples/int8_tail
M=/root/.cache/brass/SmolLM2-135M-Instruct.Q4_1.gguf
one() { local name=$1; shift
  $T "$@" -n 24 --no-gpu --no-cpu --no-points --write-ids /tmp/i22/$name.ids > /dev/null 2>&1
  /work/llamacpp/llamacpp_logits $M /tmp/i22/$name.ids /tmp/i22/$name.f32 1 > /dev/null 2>&1
  $T "$@" -n 24 --no-gpu --no-cpu --no-points --llamacpp-logits /tmp/i22/$name.f32 --write-sequence /tmp/i22/seq_$name.json > /tmp/i22/gen_$name.txt 2>&1
  echo $name
}
one france --prompt "The capital of France is" --reference tests/reference/smollm2_q4_1_f64.json
source /tmp/i22/prompt_args.sh
