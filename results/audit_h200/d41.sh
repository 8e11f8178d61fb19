. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r /tmp/m
run() { n=$1; shift 1; $B/bench --families dot4 "$@" --x-q8 --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
for r in 1 2 3; do run muse_$r --types q5_k --shapes muse; done
run l3 --types q4_k,q5_k,q6_k --shapes llama3-8b
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), substr($0,34,5), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
grep -h "streaming read" /tmp/r/muse_1.txt
( time $B/synth --preset llama3-8b -o /tmp/m/l3.gguf ) 2>&1 | grep -E "wrote|real"
( time $B/synth --preset muse-30b --layers 2 -o /tmp/m/mu.gguf ) 2>&1 | grep -E "wrote|real"
for m in l3 mu; do echo "== decode $m"; $B/decode --model /tmp/m/$m.gguf -n 64 --audit > /tmp/r/dec_$m.txt 2>&1; grep -iE "load|tok/s|defect|error|adapter|device" /tmp/r/dec_$m.txt | head -8; done
tar -C /tmp/r -cf $OUT/r.tar .
