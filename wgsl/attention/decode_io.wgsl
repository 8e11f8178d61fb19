// What both decode attention kernels (`attention/decode.wgsl` and
// `attention/decode_portable.wgsl`) take and write, in the same bindings, so one
// dispatch shape serves both. Each kernel names the element types it reads and writes
// them in (QRead, KvRead, OutWord: pairs, or 16-byte words); HD is the host's.

struct Params {
    n_kv_heads: u32,
    n_pos: u32,   // positions in the cache, this one included: keys first..n_pos
    chunk: u32,   // positions per chunk (the last may be shorter)
    n_chunks: u32,
    group: u32,   // query heads per KV head
    scale: f32,
    first: u32,   // the first position attended to (a sliding window's; else 0)
    part_stride: u32, // partial slots per query head: n_chunks rounded up to 32
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<QRead>;
@group(0) @binding(2) var<storage, read> k_cache: array<KvRead>;
@group(0) @binding(3) var<storage, read> v_cache: array<KvRead>;
// Per query head h and chunk c, at h * part_stride + c: (m, l). A head's slots start
// 256 bytes apart, so no cache line holds two heads' partials (see decode_merge).
@group(0) @binding(4) var<storage, read_write> part_ml: array<vec2<f32>>;
// Per query head h and chunk c, HD values at (h * part_stride + c) * HD.
@group(0) @binding(5) var<storage, read_write> part_acc: array<OutWord>;
@group(0) @binding(6) var<storage, read_write> out: array<OutWord>;

const HALF: u32 = HD / 2u;
