// attention/decode's view of an f16 KV cache: the row of one position and KV head (HD
// values, a multiple of 8) is HD / 8 words of 16 bytes, 8 values each. The includer
// (`attention/decode.wgsl`) declares `q`, `k_cache` and `v_cache` (arrays of vec4) and
// Word; the host sets HD and KV_ROW (u32s a row).

const WORD_VALUES: u32 = 8u;
// 16-byte words of a row, and the ones that hold values (all of them here).
const ROW_WORDS: u32 = KV_ROW / 4u;
const DATA_WORDS: u32 = HD / 8u;

struct Vals {
    a: vec4<f32>,
    b: vec4<f32>,
}

fn vals_zero() -> Vals {
    return Vals(vec4<f32>(0.0), vec4<f32>(0.0));
}

fn vals_dot(x: Vals, y: Vals) -> f32 {
    return dot(x.a, y.a) + dot(x.b, y.b);
}

fn vals_scaled(x: Vals, r: f32) -> Vals {
    return Vals(x.a * r, x.b * r);
}

// x + e * v
fn vals_mad(x: Vals, e: f32, v: Vals) -> Vals {
    return Vals(fma(vec4<f32>(e), v.a, x.a), fma(vec4<f32>(e), v.b, x.b));
}

// The i-th 4 of a word's values.
fn vals_part(x: Vals, i: u32) -> vec4<f32> {
    return select(x.a, x.b, i == 1u);
}

fn unpacked(w: vec4<u32>) -> Vals {
    return Vals(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
                vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));
}

// Word w of cache row `row` (position * n_kv_heads + KV head); its scale is 1.
fn k_word(row: u32, w: u32) -> Word {
    return Word(unpacked(k_cache[row * ROW_WORDS + w]), 1.0);
}

fn v_word(row: u32, w: u32) -> Word {
    return Word(unpacked(v_cache[row * ROW_WORDS + w]), 1.0);
}

// Word w of the query head whose values start at element `at` of q (a multiple of 4).
fn q_vals(at: u32, w: u32) -> Vals {
    let i = at / 4u + 2u * w;
    return Vals(q[i], q[i + 1u]);
}
