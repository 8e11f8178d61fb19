#!/bin/bash
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && xz -d -f *.xz 2>/dev/null; chmod +x * ; cd ..
mkdir -p /tmp/m /work; ln -sfn $PWD /work/main
[ -f /tmp/m/l3.gguf ] || .bin/synth --preset llama3-8b -o /tmp/m/l3.gguf > /dev/null 2>&1 &
for b in base p8 base p8; do timeout 60 .bin/${b}_matvec --shapes llama3-8b --kernels q4_k_dot4 --x-q8 >> $R/matvec_$b.log 2>&1; echo "matvec $b $?"; done
wait
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf --pp 0 -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -o '[0-9.]* tok/s' $R/$2.log | head -3 | tr '\n' ' ')"; }
for i in a b c; do
C final_compare l3 l3_base_$i --skip-matvec -n 128
C p8_compare l3 l3_p8_$i --skip-matvec -n 128
done
