#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f *.xz 2>/dev/null; chmod +x * ; cd ..
mkdir -p /tmp/m /work; ln -sfn $PWD /work/main
[ -f /tmp/m/sm.gguf ] || .bin/synth --preset smollm2-135m -o /tmp/m/sm.gguf > /dev/null 2>&1 &
[ -f /tmp/m/l3.gguf ] || .bin/synth --preset llama3-8b --context 40960 -o /tmp/m/l3.gguf > /dev/null 2>&1 &
date
timeout 60 .bin/t_attention > $R/test_attention.txt 2>&1; echo "attention test rc=$? $(grep 'test result' $R/test_attention.txt)"
.bin/bench3 --shapes llama3-8b,smollm2 --n-pos 64,2048,4096,4160 --kv f16 --no-prefill --iters 15 --workgroups 256,512,1024 --invocations 64,128 > $R/bench3.txt 2>&1
echo "== bench3 (shape kernel n_pos chain_us)"; grep attention/ $R/bench3.txt | awk '{print $1, $4, $(NF-8), $(NF-7), $(NF-3)}' | tr '\n' ';'; echo
wait
date
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf --skip-matvec --pp 0 -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -o 'decode at depth [0-9]*: [0-9.]* tok/s' $R/$2.log | tr '\n' ' ')"; }
for i in a b; do
C compare l3 l3_cur_$i -n 64 --depth 4096 --depth-prefill false
C compare3 l3 l3_c3_$i -n 64 --depth 4096 --depth-prefill false
C compare3 l3 l3_c3w64_$i -n 64 --depth 4096 --depth-prefill false --attention-invocations 64 --attention-workgroups 1024
done
C compare sm sm_cur -n 64 --depth 2048 --depth-prefill false
C compare3 sm sm_c3w64 -n 64 --depth 2048 --depth-prefill false --attention-invocations 64 --attention-workgroups 1024
date
