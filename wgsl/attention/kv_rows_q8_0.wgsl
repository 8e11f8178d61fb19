// A head's value pairs in a q8_0 KV cache (`attention/kv_q8_0.wgsl`), for the kernels
// that read the cache a pair at a time: cache row `row` (position * n_kv_heads + KV
// head) is KV_ROW words, pair p in the half of word p / 2 that p % 2 says, its scale
// the f32 at word HD / 4 + p / 16. The includer declares `k_cache` and `v_cache` and
// sets HD and KV_ROW.
//
// As kv_rows.wgsl, a pair can be read in two steps: its raw words (the word holding it,
// the bits of its scale; zeros where there is no pair) then its values.

alias KvRaw = vec2<u32>;

fn q8_pair(word: u32, p: u32, d: f32) -> vec2<f32> {
    let q = vec4<f32>(unpack4xI8(word));
    return select(q.xy, q.zw, p % 2u == 1u) * d;
}

fn k_raw(row: u32, p: u32) -> KvRaw {
    let first = row * KV_ROW;
    return vec2<u32>(k_cache[first + p / 2u], k_cache[first + HD / 4u + p / 16u]);
}

fn v_raw(row: u32, p: u32) -> KvRaw {
    let first = row * KV_ROW;
    return vec2<u32>(v_cache[first + p / 2u], v_cache[first + HD / 4u + p / 16u]);
}

fn raw_pair(raw: KvRaw, p: u32) -> vec2<f32> {
    return q8_pair(raw.x, p, bitcast<f32>(raw.y));
}

fn k_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(k_raw(row, p), p);
}

fn v_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(v_raw(row, p), p);
}
