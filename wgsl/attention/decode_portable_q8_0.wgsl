#include "attention/kv_q8_0.wgsl"
#include "attention/kv_rows_q8_0.wgsl"
#include "attention/decode_io.wgsl"
#include "attention/decode_portable.wgsl"

// attention/decode_portable over a q8_0 KV cache.
