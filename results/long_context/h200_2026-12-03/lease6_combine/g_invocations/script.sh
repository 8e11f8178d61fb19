#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f bench.xz 2>/dev/null; chmod +x * ; cd ..
date
B="--shapes llama3-8b --n-pos 4096,4160,16384 --kv f16 --no-prefill --iters 20 --workgroups 256,512,1024 --invocations 64,128"
.bin/bench $B --decode-only > $R/bench_inv_decode_only.txt 2>&1
.bin/bench $B > $R/bench_inv.txt 2>&1
for f in inv_decode_only inv; do echo "== $f (kernel n_pos chunks chain_us)"; grep attention/ $R/bench_$f.txt | awk '{print $4, $(NF-8), $(NF-7), $(NF-3)}' | tr '\n' ';'; echo; done
date
