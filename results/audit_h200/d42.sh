. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r /tmp/m
$B/synth --preset llama3-8b -o /tmp/m/l3.gguf 2>&1 | grep -E "wrote" | tr '\r' '\n' | tail -1
$B/synth --preset muse-30b --layers 2 -o /tmp/m/mu.gguf 2>&1 | tr '\r' '\n' | grep wrote
for m in l3 mu; do echo "== decode $m"; $B/decode --model /tmp/m/$m.gguf -n 64 --audit > /tmp/r/dec_$m.txt 2>&1; grep -iE "load |defect|error" /tmp/r/dec_$m.txt | head -4; done
tar -C /tmp/r -cf $OUT/r.tar .
