#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f *.xz 2>/dev/null; chmod +x * ; cd ..
mkdir -p /tmp/m /work; ln -sfn $PWD /work/main
[ -f /tmp/m/sm.gguf ] || .bin/synth --preset smollm2-135m -o /tmp/m/sm.gguf > /dev/null 2>&1 &
[ -f /tmp/m/l3.gguf ] || .bin/synth --preset llama3-8b --context 40960 -o /tmp/m/l3.gguf > /dev/null 2>&1 &
date
for q in 1 2; do .bin/stats_q$q --attention llama3-8b,smollm2 --types q4_k --flavours wgpu > $R/stats_q$q.txt 2>&1; echo "== stats q$q"; cat $R/stats_q$q.txt | cut -c1-400; done
timeout 120 .bin/t_attention > $R/test_attention.txt 2>&1; echo "attention test rc=$? $(grep 'test result' $R/test_attention.txt)"
date
B="--shapes llama3-8b,smollm2 --n-pos 64,512,2048,4096,16384,32768 --kv f16 --no-prefill --iters 20"
for q in 1 2; do .bin/bench_q$q $B > $R/bench_q$q.txt 2>&1; .bin/bench_q$q $B --decode-only > $R/bench_q${q}_dec.txt 2>&1; done
for f in q1 q2 q1_dec q2_dec; do echo "== $f"; grep attention/ $R/bench_$f.txt | sed 's/attention\/decode_f16 wg128 //' | tr -s ' ' | cut -d' ' -f1,4-7,9-12; done
date
wait
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf --skip-matvec --pp 0 -n 64 -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -o 'decode at depth [0-9]*: [0-9.]* tok/s' $R/$2.log | tr '\n' ' ')"; }
for i in a b; do
C compare_q1 l3 l3_q1_$i --depth 4096 --depth-prefill false
C compare_q2 l3 l3_q2_$i --depth 4096 --depth-prefill false
C compare_q1 sm sm_q1_$i --depth 2048 --depth-prefill false
C compare_q2 sm sm_q2_$i --depth 2048 --depth-prefill false
done
date
