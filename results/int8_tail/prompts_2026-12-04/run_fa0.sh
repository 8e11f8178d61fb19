#!/bin/bash
cd /work/main
M=/root/.cache/brass/SmolLM2-135M-Instruct.Q4_1.gguf
T=./target/release/examples/int8_tail
for n in france code_fib chat_water story primes json softmax; do
  /work/llamacpp/llamacpp_logits $M /tmp/i22/$n.ids /tmp/i22/${n}_fa0.f32 0 > /dev/null 2>&1
done
one() { local name=$1; shift
  $T "$@" -n 24 --no-gpu --no-cpu --no-points --llamacpp-logits /tmp/i22/${name}_fa0.f32 --errors-dir /tmp/i22/fa0_$name > /tmp/i22/${name}_fa0.txt 2>&1; }
one france --reference tests/reference/smollm2_q4_1_f64.json
sed 's/^one /one /' /tmp/i22/prompt_args.sh > /tmp/i22/prompt_args_fa0.sh
source /tmp/i22/prompt_args_fa0.sh
echo done
