#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f bench.xz 2>/dev/null; chmod +x * ; cd ..
date
B="--shapes llama3-8b --n-pos 2048,4096,4160,16384 --kv f16 --no-prefill --iters 20 --workgroups 256,384,512,1024"
.bin/bench $B --decode-only > $R/bench_wg_decode_only.txt 2>&1
.bin/bench $B > $R/bench_wg.txt 2>&1
for f in wg_decode_only wg; do echo "== $f (n_pos chunks chain_us)"; grep attention/ $R/bench_$f.txt | awk '{print $(NF-8), $(NF-7), $(NF-3)}' | tr '\n' ';'; echo; done
date
