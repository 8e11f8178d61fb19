#!/bin/bash
# Lease 2 (same machine): prompt processing, new against base, and llama.cpp CUDA on the same files.
R=$OUT/r; mkdir -p $R
cd .bin && for f in *.xz; do [ -f "${f%.xz}" ] || xz -d -k -f "$f"; done; chmod +x * ; cd ..
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
C() { b=$1; shift; .bin/$b --model /tmp/m/$1.gguf -o $R/$2.json "${@:3}" > $R/$2.log 2>&1; echo "$2: $(grep -oE 'decode at depth [0-9]*: [0-9.]* tok/s|prompt of [0-9]* tokens in [0-9.]* ms: [0-9.]* tok/s' $R/$2.log | tr '\n' ' ')"; }
C new_compare l3 pp_l3_new --skip-matvec -n 16 --pp 512,2048
C base_compare l3 pp_l3_base --skip-matvec -n 16 --pp 512,2048
C new_compare sm pp_sm_new --skip-matvec -n 16 --pp 512,2048
C base_compare sm pp_sm_base --skip-matvec -n 16 --pp 512,2048
C new_compare q3 pp_q3_new --skip-matvec -n 16 --pp 512,2048
C new_compare g270 pp_g270_new --skip-matvec -n 16 --pp 512,2048
C base_compare q3 pp_q3_base --skip-matvec -n 16 --pp 512
C base_compare g270 pp_g270_base --skip-matvec -n 16 --pp 512
LB=/tmp/anchors/build-cuda/bin/llama-bench
echo "llama.cpp build: $(tail -1 /tmp/anchors_build.log)"
for m in q3 g270 l3 sm; do [ -x $LB ] && $LB -m /tmp/m/$m.gguf -ngl 99 -fa 1 -r 2 -p 512,2048 -n 0 -o md > $R/lb_$m.md 2> $R/lb_$m.err; echo "llama.cpp $m:"; grep -E "pp(512|2048)" $R/lb_$m.md; done
