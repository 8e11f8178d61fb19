#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f *.xz 2>/dev/null; chmod +x * ; cd ..
mkdir -p /tmp/m /work; ln -sfn $PWD /work/main
[ -f /tmp/m/sm.gguf ] || .bin/synth --preset smollm2-135m -o /tmp/m/sm.gguf > /dev/null 2>&1 &
[ -f /tmp/m/l3.gguf ] || .bin/synth --preset llama3-8b --context 40960 -o /tmp/m/l3.gguf > /dev/null 2>&1 &
date
timeout 120 .bin/t_attention > $R/test_attention.txt 2>&1; echo "attention test rc=$? $(grep 'test result' $R/test_attention.txt)"
date
B="--shapes llama3-8b,smollm2 --n-pos 64,512,2048,4096,16384 --kv f16 --no-prefill --iters 20"
.bin/old_bench $B > $R/bench_old.txt 2>&1
.bin/bench $B > $R/bench_new.txt 2>&1
.bin/bench $B --workgroups 256,512,1024 --min-chunk 32,64 > $R/bench_sweep.txt 2>&1
for f in old new sweep; do echo "== $f"; grep attention/ $R/bench_$f.txt | sed 's/attention\/decode_f16 wg128 //' | tr -s ' '; done
date
wait
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf --skip-matvec --pp 0 -n 64 -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -o 'decode at depth [0-9]*: [0-9.]* tok/s' $R/$2.log | tr '\n' ' ')"; }
for i in a b; do
C old_compare l3 l3_old_$i --depth 4096 --depth-prefill false
C compare l3 l3_new_$i --depth 4096 --depth-prefill false
C old_compare sm sm_old_$i --depth 2048 --depth-prefill false
C compare sm sm_new_$i --depth 2048 --depth-prefill false
done
date
