#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f *.xz 2>/dev/null; chmod +x * ; cd ..
mkdir -p /tmp/m /work; ln -sfn $PWD /work/main
[ -f /tmp/m/sm.gguf ] || .bin/synth --preset smollm2-135m -o /tmp/m/sm.gguf > /dev/null 2>&1 &
[ -f /tmp/m/l3.gguf ] || .bin/synth --preset llama3-8b --context 40960 -o /tmp/m/l3.gguf > /dev/null 2>&1 &
date
for v in A B C; do .bin/stats_$v --attention llama3-8b,smollm2 --types q4_k --flavours wgpu > $R/stats_$v.txt 2>&1; echo "== stats $v: $(grep -A1 'attention' $R/stats_$v.txt | grep -o 'Register Count [0-9]*' | tr '\n' ' ')"; done
timeout 120 .bin/t_attention > $R/test_attention.txt 2>&1; echo "attention test rc=$? $(grep 'test result' $R/test_attention.txt)"
date
for v in A B C; do
.bin/bench_$v --shapes llama3-8b --n-pos 64,2048,4096,16384,32768 --kv f16 --no-prefill --iters 20 --workgroups 256,384,512 > $R/bench_$v.txt 2>&1
.bin/bench_$v --shapes smollm2 --n-pos 64,2048,4096 --kv f16 --no-prefill --iters 20 > $R/bench_sm_$v.txt 2>&1
echo "== $v (n_pos chunks chain_us)"; cat $R/bench_$v.txt $R/bench_sm_$v.txt | grep attention/ | awk '{print $1, $(NF-8), $(NF-7), $(NF-3)}' | tr '\n' ';'; echo
done
date
wait
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf --skip-matvec --pp 0 -n 64 -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -o 'decode at depth [0-9]*: [0-9.]* tok/s' $R/$2.log | tr '\n' ' ')"; }
for i in a b; do
for v in A B C; do C compare_$v l3 l3_${v}_$i --depth 4096 --depth-prefill false; done
for v in A B C; do C compare_$v sm sm_${v}_$i --depth 2048 --depth-prefill false; done
done
date
for v in A C; do C compare_$v l3 l3_${v}_deep --depth 16384,32768 --depth-prefill false -n 32; done
date
