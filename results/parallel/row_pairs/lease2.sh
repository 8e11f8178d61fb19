#!/bin/bash
# Issue 42, call 2 of 2 (after lease.sh, on the same warm machine): llama.cpp's batched
# decode of the same 8B file at 1, 8 and 32 sequences, on CUDA, then on Vulkan (its
# default matrix path, then with NV_cooperative_matrix2 turned off, the KHR matrices
# wgpu gives brass), beside brass's --parallel 8 and 32 (the rp build, its plan's
# spans) in this call. Carry .gl .anchors .bin/rp (as lease.sh says).
source results/lease_setup.sh
unpack_bin rp /tmp/rp
f=$(ls $BRASS_CACHE/synthetic/llama3-8b*.gguf | head -1)
llama_batched "$f"
parallel_8b /tmp/rp rp2 --parallel 8
parallel_8b /tmp/rp rp2 --parallel 32
llama_batched "$f" vulkan
GGML_VK_DISABLE_COOPMAT2=1 llama_batched "$f" vulkan _vulkan_coopmat1
echo "== done at ${SECONDS}s"
