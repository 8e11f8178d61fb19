// attention/decode's view of a q8_0 KV cache (`attention/kv_q8_0.wgsl`): the row of one
// position and KV head is HD / 16 words of 16 int8 values, then HD / 32 f32 scales (one
// per block of 32 values: words 2b and 2b + 1 share scale b), padded to whole words. The
// includer (`attention/decode.wgsl`) declares `q`, `k_cache` and `v_cache` (arrays of
// vec4) and Word; the host sets HD (a multiple of 32) and KV_ROW (u32s a row).

const WORD_VALUES: u32 = 16u;
const DATA_WORDS: u32 = HD / 16u;
const ROW_WORDS: u32 = KV_ROW / 4u;

struct Vals {
    a: vec4<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
    d: vec4<f32>,
}

fn vals_zero() -> Vals {
    return Vals(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
}

fn vals_dot(x: Vals, y: Vals) -> f32 {
    return dot(x.a, y.a) + dot(x.b, y.b) + dot(x.c, y.c) + dot(x.d, y.d);
}

fn vals_scaled(x: Vals, r: f32) -> Vals {
    return Vals(x.a * r, x.b * r, x.c * r, x.d * r);
}

// x + e * v
fn vals_mad(x: Vals, e: f32, v: Vals) -> Vals {
    let s = vec4<f32>(e);
    return Vals(fma(s, v.a, x.a), fma(s, v.b, x.b), fma(s, v.c, x.c), fma(s, v.d, x.d));
}

// The i-th 4 of a word's values.
fn vals_part(x: Vals, i: u32) -> vec4<f32> {
    switch (i) {
        case 0u: { return x.a; }
        case 1u: { return x.b; }
        case 2u: { return x.c; }
        default: { return x.d; }
    }
}

// A word's int8 values (the scale is applied to sums and weights, not to each value).
fn unpacked(w: vec4<u32>) -> Vals {
    return Vals(vec4<f32>(unpack4xI8(w.x)), vec4<f32>(unpack4xI8(w.y)),
                vec4<f32>(unpack4xI8(w.z)), vec4<f32>(unpack4xI8(w.w)));
}

// The scale of word w's block, from the row's scale word that holds it.
fn scale_at(scales: vec4<u32>, w: u32) -> f32 {
    return bitcast<f32>(scales[(w / 2u) % 4u]);
}

// Word w of cache row `row` (position * n_kv_heads + KV head), with its block's scale.
fn k_word(row: u32, w: u32) -> Word {
    let first = row * ROW_WORDS;
    return Word(unpacked(k_cache[first + w]), scale_at(k_cache[first + DATA_WORDS + w / 8u], w));
}

fn v_word(row: u32, w: u32) -> Word {
    let first = row * ROW_WORDS;
    return Word(unpacked(v_cache[first + w]), scale_at(v_cache[first + DATA_WORDS + w / 8u], w));
}

// Word w of the query head whose values start at element `at` of q (a multiple of 4).
fn q_vals(at: u32, w: u32) -> Vals {
    let i = at / 4u + 4u * w;
    return Vals(q[i], q[i + 1u], q[i + 2u], q[i + 3u]);
}
