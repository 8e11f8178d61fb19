#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f *.xz 2>/dev/null; chmod +x * ; cd ..
mkdir -p /tmp/m /work; ln -sfn $PWD /work/main
[ -f /tmp/m/sm.gguf ] || .bin/synth --preset smollm2-135m -o /tmp/m/sm.gguf > /dev/null 2>&1 &
[ -f /tmp/m/l3.gguf ] || .bin/synth --preset llama3-8b --context 40960 -o /tmp/m/l3.gguf > /dev/null 2>&1 &
date
.bin/bench_B --shapes llama3-8b --n-pos 64,4096,4097,4160 --kv f16 --no-prefill --iters 20 --workgroups 256,264 > $R/bench_B.txt 2>&1
echo "== B (n_pos chunks chain_us)"; grep attention/ $R/bench_B.txt | awk '{print $(NF-8), $(NF-7), $(NF-3)}' | tr '\n' ';'; echo
wait
date
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf --skip-matvec --pp 0 -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -o 'decode at depth [0-9]*: [0-9.]* tok/s' $R/$2.log | tr '\n' ' ')"; }
for i in a b c; do
C compare_B l3 l3_w256_$i -n 64 --depth 4096 --depth-prefill false
C compare_B l3 l3_w264_$i -n 64 --depth 4096 --depth-prefill false --attention-workgroups 264
done
date
C compare_B l3 l3_B_deep -n 32 --depth 16384,32768 --depth-prefill false
C compare_B l3 l3_B264_deep -n 32 --depth 16384,32768 --depth-prefill false --attention-workgroups 264
C compare_C l3 l3_C_deep -n 32 --depth 16384,32768 --depth-prefill false
date
