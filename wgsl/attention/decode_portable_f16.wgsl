#include "attention/kv_f16.wgsl"
#include "attention/kv_rows.wgsl"
#include "attention/decode_io.wgsl"
#include "attention/decode_portable.wgsl"

// attention/decode_portable over an f16 KV cache.
