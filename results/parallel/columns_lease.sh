#!/bin/bash
# One H200 lease for the decode steps of many rows on the matrix units (issue 42):
# the matmul tests (the matrix-unit kernels run only here), the engine's tests, brass's decode of 1/8/32 sequences (`compare --parallel`) with the
# matrix units and, same binary, without them (`--coop-matrix false`: the column
# matvec at every step), and the server under 8 and 32 streaming clients. Run from the
# checkout's root with carry [.gl, .bin/cols2] (compare, serve, engine_test, matmul_test,
# xz'd).
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=/tmp/bc
mkdir -p "$OUT"
for b in compare serve engine_test matmul_test; do xz -dc ".bin/cols2/$b.xz" >"/tmp/$b"; chmod +x "/tmp/$b"; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt"
BRASS_ADAPTER=NVIDIA /tmp/matmul_test --test-threads 1 >"$OUT/matmul_test.log" 2>&1
echo "matmul tests exited $?" | tee -a "$OUT/matmul_test.log"
# The hostile-prompt test reads the default model, which this machine cannot fetch.
BRASS_ADAPTER=NVIDIA /tmp/engine_test --skip a_hostile_prompt --nocapture >"$OUT/engine_test.log" 2>&1
echo "engine tests exited $?" | tee -a "$OUT/engine_test.log"
grep -E "matrix units|largest difference" "$OUT/engine_test.log"
for units in true false; do
    /tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
        --parallel 1,8,32 --parallel-prompt 128 --coop-matrix $units \
        -o "$OUT/compare_parallel_$units.json" 2>&1 | grep -E "sequences|decode at" |
        sed "s/^/coop-matrix $units: /" | tee -a "$OUT/compare_parallel.log"
done
model=$(ls /tmp/bc/synthetic/*.gguf | head -1)
/tmp/serve --adapter NVIDIA --model "$model" --model-name llama3-8b --sequences 32 \
    --context 512 --port 8080 >"$OUT/serve.out" 2>"$OUT/serve.err" &
server=$!
for _ in $(seq 1 300); do grep -q "^listening" "$OUT/serve.out" 2>/dev/null && break; sleep 0.5; done
cat "$OUT/serve.out"; grep "decode rows" "$OUT/serve.err"
for clients in 1 8 32 32; do
    PYTHONUNBUFFERED=1 python3 benches/serve/load.py --url http://127.0.0.1:8080 \
        --model llama3-8b --clients $clients --prompt-tokens 128 --max-tokens 128 2>&1 |
        tee -a "$OUT/load.log"
done
kill -TERM $server; wait $server; echo "serve exited $?" | tee -a "$OUT/load.log"
grep -iE "panick|error" "$OUT/serve.err" | head -5
