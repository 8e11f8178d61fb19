cd /work/main
T=./target/release/examples/int8_tail
one() { local name=$1; shift
  $T "$@" -n 24 --no-gpu --no-cpu --no-points --dither 0.01 --jitter-seeds 8 --errors-dir /tmp/i22/dith_$name > /dev/null 2>&1; echo $name; }
if [ "$1" = a ]; then
  one france --reference tests/reference/smollm2_q4_1_f64.json
  grep -E "^one (code_fib|chat_water)" /tmp/i22/prompt_args.sh > /tmp/i22/pd_a.sh; source /tmp/i22/pd_a.sh
else
  grep -E "^one (story|primes|json|softmax)" /tmp/i22/prompt_args.sh > /tmp/i22/pd_b.sh; source /tmp/i22/pd_b.sh
fi
