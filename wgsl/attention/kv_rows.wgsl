// A head's value pairs in a plain (f32 or f16) KV cache, for the kernels that read the
// cache a pair at a time (`attention/prefill.wgsl`, `attention/flash.wgsl`,
// `attention/decode_portable.wgsl`): cache row `row` (position * n_kv_heads + KV head)
// is KV_ROW words of one pair each. The includer declares `k_cache` and `v_cache`; the
// format include gives KvWord and kv_pair; the host sets KV_ROW.
//
// A pair can be read in two steps, its raw words (k_raw, v_raw: a KvRaw, zero-valued
// where there is no pair) then its values (raw_pair), so that a kernel can issue its
// loads a phase before it needs the values.

alias KvRaw = KvWord;

fn k_raw(row: u32, p: u32) -> KvRaw {
    return k_cache[row * KV_ROW + p];
}

fn v_raw(row: u32, p: u32) -> KvRaw {
    return v_cache[row * KV_ROW + p];
}

fn raw_pair(raw: KvRaw, p: u32) -> vec2<f32> {
    return kv_pair(raw);
}

fn k_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(k_raw(row, p), p);
}

fn v_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(v_raw(row, p), p);
}
