# Sourced by lease scripts on the device machine, from the checkout's root: the Vulkan
# loader from the carried .gl debs, the NVIDIA driver, brass's cache and adapter, the
# checkout at /work/main (where test binaries look for tests/reference), and each
# carried .bin/$1/*.xz unpacked into /tmp/$2 (default /tmp).
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=${BRASS_CACHE:-/tmp/bc} BRASS_ADAPTER=NVIDIA
mkdir -p /work && ln -sfn "$PWD" /work/main
unpack_bin() {
    mkdir -p "$2"
    for f in .bin/"$1"/*.xz; do
        t="$2/$(basename "$f" .xz)"; [ -x "$t" ] || { xz -dc "$f" >"$t"; chmod +x "$t"; }
    done
}
# llama.cpp CUDA built in the background, unless an earlier call of a warm lease did.
start_llama_build() {
    [ -x /tmp/anchors/build-cuda/bin/llama-bench ] ||
        (setsid nohup bash .anchors/build-on-device.sh cuda >/tmp/llama_build.log 2>&1 &)
}
# llama.cpp CUDA (`start_llama_build`, earlier in the lease)
# on every synthetic file brass wrote: pp512, pp2048 and tg32, flash attention on,
# appended to $1.
llama_bench_synthetic() {
    for i in $(seq 60); do [ -x /tmp/anchors/build-cuda/bin/llama-bench ] && break; sleep 5; done
    tail -2 /tmp/llama_build.log
    for f in "$BRASS_CACHE"/synthetic/*.gguf; do
        timeout 200 /tmp/anchors/build-cuda/bin/llama-bench -m "$f" -ngl 99 -fa 1 -r 3 \
            -p 512,2048 -n 32 2>&1 | tee -a "$1" | grep -E "pp|tg" | cut -c1-170
    done
}
# The synthetic files of shapes $2.. written by compare binary $1, one after another in
# the background (those already in the cache skipped); /tmp/synth_done when all are, which
# `wait_synth` waits for.
start_synth() {
    local compare=$1
    shift
    (for s in "$@"; do
        ls "$BRASS_CACHE"/synthetic 2>/dev/null | grep -q "^$s" ||
            timeout 200 "$compare" --synthetic "$s" --skip-matvec --pp 64 -n 1 >/dev/null 2>&1
    done; touch /tmp/synth_done) &
}
wait_synth() { for i in $(seq 100); do [ -e /tmp/synth_done ] && break; sleep 3; done; }
# Decode of many sequences on the synthetic 8B shape (`compare --parallel`, 128-token
# prompts, 128 tokens each) by the compare binary in folder $1, its lines labelled $2,
# the rest of the arguments passed on; appended to $OUT/parallel.log.
parallel_8b() {
    local dir=$1 label=$2
    shift 2
    timeout 200 "$dir"/compare --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
        --parallel-prompt 128 "$@" 2>&1 | grep -E "sequences|one pass" |
        sed "s/^/$label /" | tee -a "$OUT"/parallel.log | cut -c1-300
}
# llama.cpp's library alone (what benches/anchors/llamacpp_batched.cpp links) for backend
# $1, cuda (the default) or vulkan, from the carried .anchors source (Vulkan with the
# glslc, shaderc and Vulkan headers of its debs), each in a folder of its own, built in
# the background with every core. Its log lies in /tmp, so that a later call of a warm
# lease finds it; `llama_batched` waits for it.
start_llama_library_build() {
    local backend=${1:-cuda} here=$PWD/.anchors flags tools=true
    local dir=/tmp/anchors/$backend
    case $backend in
    cuda) flags="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" ;;
    vulkan)
        # glslc and its libraries, the Vulkan headers: the carried debs, unpacked.
        tools="for f in $here/*.deb; do dpkg -x \$f $dir/debs; done && \
          export LD_LIBRARY_PATH=$dir/debs/usr/lib/x86_64-linux-gnu"
        flags="-DGGML_VULKAN=ON -DCMAKE_PREFIX_PATH=$dir/debs/usr \
        -DVulkan_INCLUDE_DIR=$dir/debs/usr/include \
        -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 \
        -DVulkan_GLSLC_EXECUTABLE=$dir/debs/usr/bin/glslc" ;;
    esac
    (setsid nohup bash -c "mkdir -p $dir/debs && cd $dir && \
      tar xJf $here/llama.cpp-ggml-0.25.3-src.tar.xz && $tools && \
      cmake -S lcsrc -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF $flags >/dev/null && \
      cmake --build build -j 16 --target llama && echo built" >/tmp/llama_build_$backend.log 2>&1 &)
}
# llama.cpp's batched decode of $1 (a GGUF file) on backend $2 (cuda, the default, or
# vulkan, built by `start_llama_library_build`): 128-token prompts, 128 tokens each, at 1,
# 8 and 32 sequences, to $OUT/llama_batched$3.log ($3 a label: CUDA's none, Vulkan's
# _vulkan unless given; the environment is passed on).
llama_batched() {
    local backend=${2:-cuda} label=${3-}
    [ -n "$label" ] || [ "$backend" = cuda ] || label=_$backend
    local dir=/tmp/anchors/$backend libs bin=/tmp/llamacpp_batched_$backend
    for _ in $(seq 1 100); do grep -q "^built" /tmp/llama_build_$backend.log && break; sleep 3; done
    cp /tmp/llama_build_$backend.log "$OUT"/; tail -2 /tmp/llama_build_$backend.log
    libs=$(find $dir/build -name 'libllama.so*' -o -name 'libggml.so*' -o -name 'libggml-base.so*' |
        xargs -n1 dirname | sort -u)
    [ -x $bin ] || g++ -O2 -std=c++17 benches/anchors/llamacpp_batched.cpp \
        -I$dir/lcsrc/include -I$dir/lcsrc/ggml/include \
        $(for d in $libs; do echo -L$d -Wl,-rpath,$d; done) -lllama -lggml -lggml-base \
        -o $bin 2>&1 | tail -5
    $bin "$1" 128 128 1 8 32 2>"$OUT/llama_batched$label.err" | tee "$OUT/llama_batched$label.log"
    grep -iE "ggml_vulkan|matrix cores|coopmat|CUDA" "$OUT/llama_batched$label.err" | head -5
    tail -3 "$OUT/llama_batched$label.err"
}
