#include "attention/kv_q8_0.wgsl"
#include "attention/kv_rows_q8_0.wgsl"
#include "attention/flash.wgsl"

// attention/flash over a q8_0 KV cache.
