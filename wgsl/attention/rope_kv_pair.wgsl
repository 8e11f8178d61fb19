#include "attention/rope_math.wgsl"

// The plain (f32, f16) cache writer of `attention/rope_kv.wgsl` and
// `attention/rope_kv_batch.wgsl`: one unit of work per pair of values, the first
// n_heads * head_dim / 2 rotating q, the next n_kv_heads * head_dim / 2 rotating k into
// the key cache (one cache word, two adjacent values, each; values at or beyond
// rope_dim unrotated), the last as many copying v (plus its bias) into the value
// cache. The includer declares `k_cache` and `v_cache`; the format include gives
// KvWord and kv_word.

fn rope_kv_units(h: RopeHeads) -> u32 {
    return (h.n_heads + 2u * h.n_kv_heads) * (h.head_dim / 2u);
}

// `at` is the cache position the row is written at (`pos` for a lone sequence; its
// region's first row plus `pos` where sequences share the cache).
fn rope_kv_unit(t: u32, pos: u32, at: u32, q_first: u32, k_first: u32, v_first: u32, h: RopeHeads) {
    let per_head = h.head_dim / 2u;
    let q_pairs = h.n_heads * per_head;
    let kv_pairs = h.n_kv_heads * per_head;
    if (t < q_pairs) {
        rope_q_pair(t, pos, q_first, h);
    } else if (t < q_pairs + kv_pairs) {
        let e = t - q_pairs;
        let kvh = e / per_head;
        let d = 2u * (e % per_head);
        let head = k_first + kvh * h.head_dim;
        let value = vec2<f32>(rope_value(head, d, pos, q_first, h),
                              rope_value(head, d + 1u, pos, q_first, h));
        k_cache[(at * h.n_kv_heads + kvh) * h.kv_row + d / 2u] = kv_word(value);
    } else {
        let e = t - q_pairs - kv_pairs;
        let kvh = e / per_head;
        let d = 2u * (e % per_head);
        let first = v_first + kvh * h.head_dim + d;
        v_cache[(at * h.n_kv_heads + kvh) * h.kv_row + d / 2u] =
            kv_word(vec2<f32>(biased(first, q_first), biased(first + 1u, q_first)));
    }
}
