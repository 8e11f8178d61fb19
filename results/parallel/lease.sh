#!/bin/bash
# One H200 lease for issue 42: brass's decode of 1/8/32 sequences at once on the 8B shape
# (`compare --parallel`), single-sequence decode alternated with the build before the
# engine, and llama.cpp's batched decode (benches/anchors/llamacpp_batched.cpp) on the
# same file. Run from the checkout's root with carry [.gl, .anchors, .bin/par].
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=/tmp/bc
mkdir -p "$OUT"
# llama.cpp CUDA builds while brass measures (GPU work of brass is unaffected; its host
# recording shares the 16 cores with the build, which the note says).
(setsid nohup bash .anchors/build-on-device.sh cuda >"$OUT/llama_build.log" 2>&1 &)
for b in compare compare_base; do xz -dc ".bin/par/$b.xz" >"/tmp/$b"; chmod +x "/tmp/$b"; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt"
/tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
    --parallel 1,8,32 -o "$OUT/brass_parallel.json" 2>&1 | tee "$OUT/brass_parallel.log"
model=$(ls /tmp/bc/synthetic/*.gguf | head -1)
for i in $(seq 1 ${AB:-3}); do
  for b in compare_base compare; do
    /tmp/$b --adapter NVIDIA --model "$model" --skip-matvec --pp 0 -n 128 -o "$OUT/tg_${b}_$i.json" 2>&1 \
      | grep -E "decode at depth" | sed "s/^/$b $i: /" | tee -a "$OUT/tg_ab.log"
  done
done
for _ in $(seq 1 90); do grep -q "^built" "$OUT/llama_build.log" && break; sleep 4; done
B=/tmp/anchors/build-cuda; LC=/tmp/anchors/lcsrc
g++ -O2 -std=c++17 benches/anchors/llamacpp_batched.cpp -I$LC/include -I$LC/ggml/include \
    -L$B/bin -lllama -lggml -lggml-base -Wl,-rpath,$B/bin -o /tmp/llamacpp_batched 2>&1 | tail -5
/tmp/llamacpp_batched "$model" 128 128 1 8 32 2>"$OUT/llama_batched.err" | tee "$OUT/llama_batched.log"
tail -3 "$OUT/llama_batched.err"
