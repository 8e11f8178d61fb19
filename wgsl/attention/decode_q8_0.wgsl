#include "attention/kv_words_q8_0.wgsl"
#include "attention/decode_io.wgsl"
#include "attention/decode.wgsl"

// attention/decode over a q8_0 KV cache.
