// One pair's share of RoPE and the KV-cache append, shared by `attention/rope_kv.wgsl`
// (one token) and `attention/rope_kv_batch.wgsl` (many) so both do the same arithmetic
// in the same order and write the same bits for the same token.
//
// Pair `t` of a token at position `pos` whose q, k and v start at elements `q_first`,
// `k_first` and `v_first` of `qkv`: the first n_heads * head_dim / 2 pairs rotate q in
// place (rope_dim / 2 per head; the rest of a head's values only take their bias), the
// next n_kv_heads * head_dim / 2 rotate k into row `pos` of the key cache (one cache
// word, two adjacent values, each; values at or beyond rope_dim unrotated),
// the last as many copy v into row `pos` of the value cache. `bias` (laid out as a
// token's q, k and v in `qkv`, zeros for models without) is added first: qwen2's
// projections have biases. The includer declares `cs`, `qkv`, `bias`, `k_cache` and
// `v_cache`; the format include gives KvWord and kv_word; the host sets NEOX.
//
// Which values a rotation pairs is llama.cpp's rope mode: NEOX false is its "normal"
// mode, adjacent values (2i, 2i + 1), for llama files (whose Q/K weights the converter
// permuted to match); NEOX true pairs value i with i + rope_dim / 2 (qwen2, gemma3).

struct RopeHeads {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rope_dim: u32,
}

// The two values of a head that rotated pair i takes.
fn rope_pair(i: u32, half: u32) -> vec2<u32> {
    if (NEOX) {
        return vec2<u32>(i, i + half);
    }
    return vec2<u32>(2u * i, 2u * i + 1u);
}

// The pair (x0, x1) at pair i of a head, rotated for position `pos`.
fn rope_rotate(x0: f32, x1: f32, i: u32, pos: u32, rope_dim: u32) -> vec2<f32> {
    let c = cs[pos * (rope_dim / 2u) + i];
    return vec2<f32>(x0 * c.x - x1 * c.y, x0 * c.y + x1 * c.x);
}

fn biased(j: u32, q_first: u32) -> f32 {
    return qkv[j] + bias[j - q_first];
}

// Value d of the head at element `head` of `qkv`, rotated: each value of a pair alone,
// by the same expression rope_rotate gives it, so that a cache word's two values can
// belong to different pairs (NEOX).
fn rope_value(head: u32, d: u32, pos: u32, q_first: u32, h: RopeHeads) -> f32 {
    let x = biased(head + d, q_first);
    if (d >= h.rope_dim) {
        return x;
    }
    let half = h.rope_dim / 2u;
    var i = d / 2u;
    if (NEOX) {
        i = d % half;
    }
    let pair = rope_pair(i, half);
    let c = cs[pos * half + i];
    if (d == pair.x) {
        return x * c.x - biased(head + pair.y, q_first) * c.y;
    }
    return biased(head + pair.x, q_first) * c.y + x * c.x;
}

fn rope_kv_pair(t: u32, pos: u32, q_first: u32, k_first: u32, v_first: u32, h: RopeHeads) {
    let half = h.rope_dim / 2u;
    let per_head = h.head_dim / 2u;
    let q_pairs = h.n_heads * per_head;
    let kv_pairs = h.n_kv_heads * per_head;
    let row = pos * kv_pairs;
    if (t < q_pairs) {
        let i = t % per_head;
        let head = q_first + (t / per_head) * h.head_dim;
        if (i < half) {
            let pair = rope_pair(i, half);
            let r = rope_rotate(biased(head + pair.x, q_first), biased(head + pair.y, q_first),
                                i, pos, h.rope_dim);
            qkv[head + pair.x] = r.x;
            qkv[head + pair.y] = r.y;
        } else {
            // Past rope_dim: only the bias.
            let d = h.rope_dim + 2u * (i - half);
            qkv[head + d] = biased(head + d, q_first);
            qkv[head + d + 1u] = biased(head + d + 1u, q_first);
        }
    } else if (t < q_pairs + kv_pairs) {
        let e = t - q_pairs;
        let d = (2u * e) % h.head_dim;
        let head = k_first + 2u * e - d;
        let value = vec2<f32>(rope_value(head, d, pos, q_first, h),
                              rope_value(head, d + 1u, pos, q_first, h));
        k_cache[row + e] = kv_word(value);
    } else {
        let e = t - q_pairs - kv_pairs;
        let first = v_first + 2u * e;
        v_cache[row + e] = kv_word(vec2<f32>(biased(first, q_first), biased(first + 1u, q_first)));
    }
}
