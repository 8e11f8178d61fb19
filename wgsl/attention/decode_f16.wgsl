#include "attention/kv_words_f16.wgsl"
#include "attention/decode_io.wgsl"
#include "attention/decode.wgsl"

// attention/decode over an f16 KV cache.
