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
# Only the library (llama-bench and quantize are not needed here), with every core.
src=$PWD/.anchors/llama.cpp-ggml-0.25.3-src.tar.xz
(setsid nohup bash -c "mkdir -p /tmp/anchors && cd /tmp/anchors && tar xJf $src && \
  cmake -S lcsrc -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && \
  cmake --build build-cuda -j 16 --target llama && echo built" >"$OUT/llama_build.log" 2>&1 &)
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
# The decode attention tests that failed on the H200 for the row-table kernel (f32 cache,
# LastWorkgroup merge, one merge column): the build before it, and this one.
for t in att_base att_new; do
  [ -f ".bin/par/$t.xz" ] || continue
  xz -dc ".bin/par/$t.xz" >"/tmp/$t"; chmod +x "/tmp/$t"
  /tmp/$t decode_attention 2>&1 | grep -E "^test |expected|test result" | sed "s/^/$t: /" | tee -a "$OUT/att_h200.log"
done
for _ in $(seq 1 100); do grep -q "^built" "$OUT/llama_build.log" && break; sleep 3; done
tail -2 "$OUT/llama_build.log"
B=/tmp/anchors/build-cuda; LC=/tmp/anchors/lcsrc
libs=$(find $B -name 'libllama.so*' -o -name 'libggml.so*' -o -name 'libggml-base.so*' | xargs -n1 dirname | sort -u)
g++ -O2 -std=c++17 benches/anchors/llamacpp_batched.cpp -I$LC/include -I$LC/ggml/include \
    $(for d in $libs; do echo -L$d -Wl,-rpath,$d; done) -lllama -lggml -lggml-base \
    -o /tmp/llamacpp_batched 2>&1 | tail -5
/tmp/llamacpp_batched "$model" 128 128 1 8 32 2>"$OUT/llama_batched.err" | tee "$OUT/llama_batched.log"
tail -3 "$OUT/llama_batched.err"
