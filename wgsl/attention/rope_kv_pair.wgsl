// One pair's share of RoPE and the KV-cache append, shared by `attention/rope_kv.wgsl`
// (one token) and `attention/rope_kv_batch.wgsl` (many) so both do the same arithmetic
// in the same order and write the same bits for the same token.
//
// Pair `t` of a token at position `pos` whose q, k and v start at elements `q_first`,
// `k_first` and `v_first` of `qkv`: the first n_heads * rope_dim / 2 pairs rotate q in
// place, the next n_kv_heads * head_dim / 2 rotate k into row `pos` of the key cache
// (pairs at or beyond rope_dim unrotated), the last as many copy v into row `pos` of
// the value cache. The includer declares `cs`, `qkv`, `k_cache` and `v_cache`; the
// format include gives KvWord and kv_word.

struct RopeHeads {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rope_dim: u32,
}

// The pair (x0, x1) at pair i of a head, rotated for position `pos`.
fn rope_rotate(x0: f32, x1: f32, i: u32, pos: u32, rope_dim: u32) -> vec2<f32> {
    let c = cs[pos * (rope_dim / 2u) + i];
    return vec2<f32>(x0 * c.x - x1 * c.y, x0 * c.y + x1 * c.x);
}

fn rope_kv_pair(t: u32, pos: u32, q_first: u32, k_first: u32, v_first: u32, h: RopeHeads) {
    let half = h.rope_dim / 2u;
    let q_pairs = h.n_heads * half;
    let kv_pairs = h.n_kv_heads * h.head_dim / 2u;
    let row = pos * kv_pairs;
    if (t < q_pairs) {
        let i = t % half;
        let j = q_first + (t / half) * h.head_dim + 2u * i;
        let r = rope_rotate(qkv[j], qkv[j + 1u], i, pos, h.rope_dim);
        qkv[j] = r.x;
        qkv[j + 1u] = r.y;
    } else if (t < q_pairs + kv_pairs) {
        let e = t - q_pairs;
        let i = e % (h.head_dim / 2u);
        let first = k_first + 2u * e;
        var value = vec2<f32>(qkv[first], qkv[first + 1u]);
        if (2u * i < h.rope_dim) {
            value = rope_rotate(value.x, value.y, i, pos, h.rope_dim);
        }
        k_cache[row + e] = kv_word(value);
    } else {
        let e = t - q_pairs - kv_pairs;
        let first = v_first + 2u * e;
        v_cache[row + e] = kv_word(vec2<f32>(qkv[first], qkv[first + 1u]));
    }
}
