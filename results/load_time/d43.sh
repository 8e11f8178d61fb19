. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r /tmp/m
$B/synth --preset llama3-8b -o /tmp/m/l3.gguf 2>&1 | tr '\r' '\n' | grep wrote
$B/synth --preset muse-30b --layers 2 -o /tmp/m/mu.gguf 2>&1 | tr '\r' '\n' | grep wrote
for r in 1 2; do
 for v in old new; do for m in l3 mu; do echo "$v $m $r: $($B/decode_$v --model /tmp/m/$m.gguf -n 8 2>&1 | grep -E '^load' )"; done; done
done
