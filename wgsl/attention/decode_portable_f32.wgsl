#include "attention/kv_f32.wgsl"
#include "attention/kv_rows.wgsl"
#include "attention/decode_io.wgsl"
#include "attention/decode_portable.wgsl"

// attention/decode_portable over an f32 KV cache.
