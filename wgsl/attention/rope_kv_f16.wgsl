#include "attention/kv_f16.wgsl"
#include "attention/rope_kv_pair.wgsl"
#include "attention/rope_kv.wgsl"

// attention/rope_kv appending to an f16 KV cache.
