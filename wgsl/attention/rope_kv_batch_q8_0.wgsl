#include "attention/kv_q8_0.wgsl"
#include "attention/rope_kv_block.wgsl"
#include "attention/rope_kv_batch.wgsl"

// attention/rope_kv_batch appending to a q8_0 KV cache.
