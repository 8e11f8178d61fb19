#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f *.xz 2>/dev/null; chmod +x * ; cd ..
mkdir -p /tmp/m /work; ln -sfn $PWD /work/main
[ -f /tmp/m/sm.gguf ] || .bin/synth --preset smollm2-135m -o /tmp/m/sm.gguf > /dev/null 2>&1 &
[ -f /tmp/m/l3.gguf ] || .bin/synth --preset llama3-8b --context 40960 -o /tmp/m/l3.gguf > /dev/null 2>&1 &
date
.bin/stats --attention llama3-8b,smollm2 --types q4_k --flavours wgpu > $R/stats.txt 2>&1; echo "stats: $(grep -o 'Register Count [0-9]*' $R/stats.txt | tr '\n' ' ')"
timeout 120 .bin/t_attention > $R/test_attention.txt 2>&1; echo "attention test rc=$? $(grep 'test result' $R/test_attention.txt)"
date
B="--shapes llama3-8b,smollm2 --n-pos 64,2048,4096,16384 --kv f16 --no-prefill --iters 20"
.bin/old_bench $B > $R/bench_old.txt 2>&1
.bin/bench $B > $R/bench_new.txt 2>&1
.bin/lz_bench $B > $R/bench_lz.txt 2>&1
.bin/old_bench $B --decode-only > $R/bench_old_decode_only.txt 2>&1
.bin/bench $B --decode-only > $R/bench_new_decode_only.txt 2>&1
.bin/bench --shapes llama3-8b --n-pos 4096,16384 --kv f16 --no-prefill --iters 20 --workgroups 256,384,512 > $R/bench_new_wg.txt 2>&1
for f in old new lz old_decode_only new_decode_only new_wg; do echo "== $f (shape n_pos chunks chain_us %probe)"; grep attention/ $R/bench_$f.txt | awk '{print $1, $(NF-8), $(NF-7), $(NF-3), $(NF-1)}' | tr '\n' ';'; echo; done
date
wait
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf --skip-matvec --pp 0 -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -o 'decode at depth [0-9]*: [0-9.]* tok/s' $R/$2.log | tr '\n' ' ')"; }
for i in a b c; do
C old_compare l3 l3_old_$i -n 64 --depth 4096 --depth-prefill false
C compare l3 l3_new_$i -n 64 --depth 4096 --depth-prefill false
C lz_compare l3 l3_lz_$i -n 64 --depth 4096 --depth-prefill false
done
for i in a b; do
C old_compare sm sm_old_$i -n 64 --depth 2048 --depth-prefill false
C compare sm sm_new_$i -n 64 --depth 2048 --depth-prefill false
done
date
C compare l3 l3_new_deep -n 32 --depth 16384,32768 --depth-prefill false
.bin/profile_step /tmp/m/l3.gguf --depth 4096 > $R/prof_l3_d4096.txt 2>&1
grep -E "attention|sum" $R/prof_l3_d4096.txt
date
