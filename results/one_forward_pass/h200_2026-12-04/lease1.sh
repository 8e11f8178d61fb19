#!/bin/bash
# Lease 1: setup, llama.cpp CUDA build in the background, prefill attention tests, decode A/B.
R=$OUT/r; mkdir -p $R
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
cd .bin && for f in *.xz; do [ -f "${f%.xz}" ] || xz -d -k -f "$f"; done; chmod +x * ; cd ..
mkdir -p /tmp/m /work; ln -sfn $PWD /work/main
[ -x /tmp/anchors/build-cuda/bin/llama-bench ] || (setsid nohup bash .anchors/build-on-device.sh cuda > /tmp/anchors_build.log 2>&1 &)
[ -f /tmp/m/sm.gguf ] || .bin/synth --preset smollm2-135m -o /tmp/m/sm.gguf > /dev/null 2>&1 &
[ -f /tmp/m/l3.gguf ] || .bin/synth --preset llama3-8b -o /tmp/m/l3.gguf > /dev/null 2>&1 &
[ -f /tmp/m/q3.gguf ] || .bin/synth --preset qwen3-8b -o /tmp/m/q3.gguf > /dev/null 2>&1 &
[ -f /tmp/m/g270.gguf ] || .bin/synth --preset gemma3-270m -o /tmp/m/g270.gguf > /dev/null 2>&1 &
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
# The prefill attention kernels' tests (key passes, windows) on the H200.
.bin/attention_test --test-threads 4 prefill > $R/attention_test.log 2>&1; echo "attention tests rc=$?: $(grep 'test result' $R/attention_test.log)"
wait
ls -la /tmp/m >> $R/files.txt
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -oE 'decode at depth [0-9]*: [0-9.]* tok/s|prompt of [0-9]* tokens in [0-9.]* ms: [0-9.]* tok/s' $R/$2.log | tr '\n' ' ')"; }
for i in a b; do
C new_compare sm tg_sm_new_$i --skip-matvec --pp 0 -n 128
C base_compare sm tg_sm_base_$i --skip-matvec --pp 0 -n 128
C new_compare l3 tg_l3_new_$i --skip-matvec --pp 0 -n 128
C base_compare l3 tg_l3_base_$i --skip-matvec --pp 0 -n 128
done
echo "llama.cpp build: $(tail -1 /tmp/anchors_build.log)"
