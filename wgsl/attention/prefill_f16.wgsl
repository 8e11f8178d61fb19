#include "attention/kv_f16.wgsl"
#include "attention/kv_rows.wgsl"
#include "attention/prefill.wgsl"

// attention/prefill over an f16 KV cache.
