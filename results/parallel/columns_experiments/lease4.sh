#!/bin/bash
# The decode columns reading x's matrices from memory (x converted once per step by
# unpack_x.wgsl, the workgroup staging weights only), on an H100: the matrix-unit
# and engine tests, the kernel per tile, decode of many sequences with the build
# before (.bin/frs) and this one (.bin/xr) alternated, the crossover, and llama.cpp's
# batched decode (benches/anchors/llamacpp_batched.cpp) on the same file.
# Carry .gl .anchors .bin/frs .bin/xr.
source results/lease_setup.sh
unpack_bin frs /tmp/sets/frs; unpack_bin xr /tmp/sets/xr
fr=/tmp/sets/frs; xr=/tmp/sets/xr
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.log
src=$PWD/.anchors/llama.cpp-ggml-0.25.3-src.tar.xz
(setsid nohup bash -c "mkdir -p /tmp/anchors && cd /tmp/anchors && tar xJf $src && \
  cmake -S lcsrc -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && \
  cmake --build build-cuda -j 14 --target llama && echo built" >$OUT/llama_build.log 2>&1 &)
start_synth $xr/compare llama3-8b
timeout 150 $xr/matmul_test 2>&1 | grep -E "^test |test result" | tee $OUT/matmul_test.log | tail -2
timeout 200 $xr/matmul_bench --shapes llama3-8b --types q4_k,q6_k --tokens 4,8,16,32 \
    --kernels columns --unpacked none --iters 20 --columns 2:2:4,2:1:4,4:2:4,1:1:8 \
    >$OUT/columns_bench.log 2>&1
grep -E "columns" $OUT/columns_bench.log | awk '{print $2,$3,$9,$10,$11,$13,$14,$15,$17}' | head -100
wait_synth
timeout 150 $xr/engine_test 2>&1 | grep -E "^test |test result" | tee $OUT/engine_test.log | tail -2
for _ in $(seq 1 100); do grep -q "^built" $OUT/llama_build.log && break; sleep 3; done
tail -1 $OUT/llama_build.log
parallel_8b $xr xr --parallel 1,8,16,32
parallel_8b $fr fr --parallel 1,8,16,32
parallel_8b $xr xr_from4 --parallel 4,8,12 --decode-units-from 4
parallel_8b $xr xr --parallel 16,32
B=/tmp/anchors/build-cuda; LC=/tmp/anchors/lcsrc
libs=$(find $B -name 'libllama.so*' -o -name 'libggml.so*' -o -name 'libggml-base.so*' | xargs -n1 dirname | sort -u)
g++ -O2 -std=c++17 benches/anchors/llamacpp_batched.cpp -I$LC/include -I$LC/ggml/include \
    $(for d in $libs; do echo -L$d -Wl,-rpath,$d; done) -lllama -lggml -lggml-base \
    -o /tmp/llamacpp_batched 2>&1 | tail -3
model=$(ls $BRASS_CACHE/synthetic/*.gguf | head -1)
timeout 200 /tmp/llamacpp_batched "$model" 128 128 1 8 16 32 2>$OUT/llama_batched.err | tee $OUT/llama_batched.log
tail -2 $OUT/llama_batched.err
echo "== done at ${SECONDS}s"
