// KV cache in q8_0: each block of 32 values of a head's row is 32 int8 values q and a
// scale d = max|x| / 127, the values d * q (q = x / d rounded half away from zero, as
// ggml's quantize_row_q8_0). A cache row (one position's KV head of head_dim values) is
// head_dim / 4 words of four int8 values, then head_dim / 32 f32 scales, then padding
// to a multiple of four words (16 bytes): 36 words for a head of 128, where f16 takes 64.
// ggml keeps d as f16; here it is f32 in the same padded row, so d adds no error.

alias KvWord = u32;
