#include "attention/kv_f16.wgsl"
#include "attention/rope_kv_pair.wgsl"
#include "attention/rope_kv_batch.wgsl"

// attention/rope_kv_batch appending to an f16 KV cache.
