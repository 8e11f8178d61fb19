#include "attention/rope_math.wgsl"

// The q8_0 cache writer of `attention/rope_kv.wgsl` and `attention/rope_kv_batch.wgsl`
// (`attention/kv_q8_0.wgsl`): one unit of work per pair of q, as the plain writer's,
// then one per block of 32 values of k (rotated by the same arithmetic) and of v (plus
// its bias): the block's values, their scale, and the int8 words. The includer declares
// `k_cache` and `v_cache` (arrays of u32). Heads are whole blocks (head_dim % 32 == 0:
// the host checks).

fn rope_kv_units(h: RopeHeads) -> u32 {
    return h.n_heads * (h.head_dim / 2u) + 2u * h.n_kv_heads * (h.head_dim / 32u);
}

// x rounded half away from zero (C's roundf, which ggml's quantizer uses), within the
// int8 range: x * (1 / d) at max|x| may land a hair past 127.
fn round_away(x: f32) -> f32 {
    return clamp(sign(x) * floor(abs(x) + 0.5), -127.0, 127.0);
}

// `at` is the cache position the row is written at (`pos` for a lone sequence; its
// region's first row plus `pos` where sequences share the cache).
fn rope_kv_unit(t: u32, pos: u32, at: u32, q_first: u32, k_first: u32, v_first: u32, h: RopeHeads) {
    let q_pairs = h.n_heads * (h.head_dim / 2u);
    if (t < q_pairs) {
        rope_q_pair(t, pos, q_first, h);
        return;
    }
    let blocks = h.head_dim / 32u;
    let kv_blocks = h.n_kv_heads * blocks;
    let is_v = t - q_pairs >= kv_blocks;
    let b = (t - q_pairs) % kv_blocks;
    let kvh = b / blocks;
    let d0 = (b % blocks) * 32u;
    var x: array<f32, 32>;
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) {
        var v: f32;
        if (is_v) {
            v = biased(v_first + kvh * h.head_dim + d0 + i, q_first);
        } else {
            v = rope_value(k_first + kvh * h.head_dim, d0 + i, pos, q_first, h);
        }
        x[i] = v;
        amax = max(amax, abs(v));
    }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    let row = (at * h.n_kv_heads + kvh) * h.kv_row;
    for (var w = 0u; w < 8u; w++) {
        let q = vec4<i32>(vec4<f32>(round_away(x[4u * w] * id), round_away(x[4u * w + 1u] * id),
                                    round_away(x[4u * w + 2u] * id), round_away(x[4u * w + 3u] * id)));
        let packed = pack4xI8(q);
        if (is_v) {
            v_cache[row + d0 / 4u + w] = packed;
        } else {
            k_cache[row + d0 / 4u + w] = packed;
        }
    }
    let scale_at = row + h.head_dim / 4u + d0 / 32u;
    if (is_v) {
        v_cache[scale_at] = bitcast<u32>(d);
    } else {
        k_cache[scale_at] = bitcast<u32>(d);
    }
}
