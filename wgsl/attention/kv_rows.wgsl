// A head's value pairs in a plain (f32 or f16) KV cache, for the kernels that read the
// cache a pair at a time (`attention/prefill.wgsl`, `attention/decode_portable.wgsl`):
// cache row `row` (position * n_kv_heads + KV head) is KV_ROW words of one pair each.
// The includer declares `k_cache` and `v_cache`; the format include gives KvWord and
// kv_pair; the host sets KV_ROW.

fn k_pair(row: u32, p: u32) -> vec2<f32> {
    return kv_pair(k_cache[row * KV_ROW + p]);
}

fn v_pair(row: u32, p: u32) -> vec2<f32> {
    return kv_pair(v_cache[row * KV_ROW + p]);
}
