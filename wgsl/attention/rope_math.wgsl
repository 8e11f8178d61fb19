// RoPE's arithmetic for one token, shared by the KV-cache writers
// (`attention/rope_kv_pair.wgsl` for plain caches, `attention/rope_kv_block.wgsl` for
// q8_0) so every format rotates q and k with the same bits, and by `attention/rope_kv.wgsl`
// (one token) and `attention/rope_kv_batch.wgsl` (many).
//
// A token at position `pos` has its q, k and v at elements `q_first`, `k_first` and
// `v_first` of `qkv`. `bias` (laid out as a token's q, k and v in `qkv`, zeros for
// models without) is added first: qwen2's projections have biases. The includer
// declares `cs`, `qkv` and `bias`; the host sets NEOX.
//
// Which values a rotation pairs is llama.cpp's rope mode: NEOX false is its "normal"
// mode, adjacent values (2i, 2i + 1), for llama files (whose Q/K weights the converter
// permuted to match); NEOX true pairs value i with i + rope_dim / 2 (qwen2, gemma3).

struct RopeHeads {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rope_dim: u32,
    // KvWords from one cache row (a position's KV head) to the next.
    kv_row: u32,
}

// The two values of a head that rotated pair i takes.
fn rope_pair(i: u32, half: u32) -> vec2<u32> {
    if (NEOX) {
        return vec2<u32>(i, i + half);
    }
    return vec2<u32>(2u * i, 2u * i + 1u);
}

// The pair (x0, x1) at pair i of a head, rotated for position `pos`. The fused
// multiply-adds are written out: left to the compiler, a - b * c contracts either way,
// and on the H200 one kernel's did so differently from another's (rope_kv_batch's keys
// then differed from rope_kv's in the last bit).
fn rope_rotate(x0: f32, x1: f32, i: u32, pos: u32, rope_dim: u32) -> vec2<f32> {
    let c = cs[pos * (rope_dim / 2u) + i];
    return vec2<f32>(fma(x0, c.x, -(x1 * c.y)), fma(x0, c.y, x1 * c.x));
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
        return fma(x, c.x, -(biased(head + pair.y, q_first) * c.y));
    }
    return fma(biased(head + pair.x, q_first), c.y, x * c.x);
}

// Pair t (< n_heads * head_dim / 2) of q: rotated in place (rope_dim / 2 pairs per
// head; the rest of a head's values only take their bias).
fn rope_q_pair(t: u32, pos: u32, q_first: u32, h: RopeHeads) {
    let half = h.rope_dim / 2u;
    let per_head = h.head_dim / 2u;
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
}
