#include "attention/kv_words_f32.wgsl"
#include "attention/decode_io.wgsl"
#include "attention/decode.wgsl"

// attention/decode over an f32 KV cache.
