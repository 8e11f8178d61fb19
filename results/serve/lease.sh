#!/bin/bash
# One H200 lease for issue 43: examples/serve on the 8B shape (synth's llama3-8b, Q4_K_M)
# with 1 (twice: the first compiles the pipelines), 8 and 32 streaming clients at once (benches/serve/load.py), beside
# `compare --parallel 1,8,32` on the same file in the same lease. Run from the checkout's
# root with carry [.gl, .bin/serve].
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=/tmp/bc
mkdir -p "$OUT"
for b in compare serve; do xz -dc ".bin/serve/$b.xz" >"/tmp/$b"; chmod +x "/tmp/$b"; done
# The engine's tests (each sequence bit for bit as alone, prompts sharing a step) on
# the H200, where a test binary was carried.
if [ -f .bin/serve/engine_test.xz ]; then
    xz -dc .bin/serve/engine_test.xz >/tmp/engine_test; chmod +x /tmp/engine_test
    # The hostile-prompt test reads the default model, which this machine cannot fetch
    # (no network) and the carry cannot hold (98 MB); it runs in CI on lavapipe.
    BRASS_ADAPTER=NVIDIA /tmp/engine_test --skip a_hostile_prompt >"$OUT/engine_test.log" 2>&1
    echo "engine tests exited $?" | tee -a "$OUT/engine_test.log"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt"
python3 --version >>"$OUT/gpu.txt"
# Writes the synthetic file into $BRASS_CACHE/synthetic, and measures the engine alone.
/tmp/compare --adapter NVIDIA --synthetic llama3-8b --skip-matvec --pp 0 -n 128 \
    --parallel 1,8,32 --parallel-prompt 128 -o "$OUT/compare_parallel.json" 2>&1 |
    tee "$OUT/compare_parallel.log"
model=$(ls /tmp/bc/synthetic/*.gguf | head -1)
/tmp/serve --adapter NVIDIA --model "$model" --model-name llama3-8b --sequences 32 \
    --context 512 --port 8080 >"$OUT/serve.out" 2>"$OUT/serve.err" &
server=$!
for _ in $(seq 1 300); do grep -q "^listening" "$OUT/serve.out" 2>/dev/null && break; sleep 0.5; done
cat "$OUT/serve.out"
run=0
for clients in 1 1 8 32 32; do
    run=$((run + 1))
    PYTHONUNBUFFERED=1 python3 benches/serve/load.py --url http://127.0.0.1:8080 \
        --model llama3-8b --clients $clients --prompt-tokens 128 --max-tokens 128 \
        --json "$OUT/load_${run}_${clients}.json" 2>&1 | tee -a "$OUT/load.log"
done
# One file of every run's report (the device returns a few files per call).
python3 -c "import glob, json, sys; json.dump([json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + '/load_*.json'))], open(sys.argv[1] + '/load.json', 'w'), indent=1)" "$OUT" &&
    rm "$OUT"/load_*.json
curl -s http://127.0.0.1:8080/health | tee "$OUT/health.json"; echo
kill -TERM $server; wait $server; echo "serve exited $?" | tee -a "$OUT/load.log"
grep -c "completion tokens" "$OUT/serve.err"
grep -iE "panick|error" "$OUT/serve.err" | head -5
