#include "matvec/coop.wgsl"

// Q6_K: 256 weights per 210-byte super-block
//   {ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16}
// A unit is run r = s % 4 of half h = s / 4 of the super-block, s = unit % 8: weight l
// (0..32) takes its low 4 bits from nibble r / 2 of ql[64 * h + 32 * (r % 2) + l] and its
// top 2 bits from bits 2r..2r+2 of qh[32 * h + l]; value = d * sc * (q - 32) with
// sc = scales[8 * h + 2 * r + l / 16], so a unit has two scales, one per 16 weights.
//
// Algebra: sum(w * x) = d * sum over the unit's 4-element chunks of sc * sum((q - 32) * x),
// with the chunk's scale applied to its two partial sums. The quants are assembled two at
// a time in the mantissas of a pair of f16 1024.0 (0x6400) and widened with
// unpack2x16float, which gives 1024 + q exactly without int-to-float conversions (a
// fraction of the FMA rate on NVIDIA), so q - 32 = (1024 + q) - 1056 and
// sum((q - 32) * x) = sum((1024 + q) * x) - 1056 * sum(x).
//
// 210-byte blocks leave odd super-blocks (and rows) only 2-byte aligned; the alignment is
// the same for every field of a unit, so `word2` funnels two aligned words by a shift
// chosen once per unit instead of load_u32's branch, which would diverge between the
// lanes of even and odd super-blocks.
//
// Order of the x reads: as in q4_k_coop.wgsl, each lane starts at chunk (unit / 2) % 8 of
// its eight 4-element chunks so the lanes of a subgroup do not all hit the same
// workgroup-memory banks; the chunk's scale is picked by its index.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// The 4 bytes at 2-aligned byte offset `byte`; `odd` says whether it is 2 mod 4.
fn word2(byte: u32, odd: bool) -> u32 {
    let i = byte >> 2u;
    let lo = w[i];
    return select(lo, (lo >> 16u) | (w[i + 1u] << 16u), odd);
}

// 1024 + the four 6-bit quants of a chunk: nibbles at bits n + 8k of `ql`, top bits at
// bits hs + 8k of `qh` (k = 0..4).
fn quants(ql: u32, qh: u32, n: u32, hs: u32) -> vec4<f32> {
    let t = qh >> hs;
    let even = unpack2x16float(((ql >> n) & 0x000f000fu) | ((t << 4u) & 0x00300030u) | 0x64006400u);
    let odd = unpack2x16float(((ql >> (n + 8u)) & 0x000f000fu) | ((t >> 4u) & 0x00300030u) | 0x64006400u);
    return vec4<f32>(even.x, odd.x, even.y, odd.y);
}

struct Unit {
    ql: u32,        // byte offset of the unit's 32 ql bytes
    qh: u32,        // byte offset of its 32 qh bytes
    odd: bool,      // both offsets are 2 mod 4
    n: u32,         // nibble shift in ql
    hs: u32,        // bit shift in qh
    scales: vec2<f32>,
    xs_base: u32,
}

// sc * sum((1024 + q) * x) and sc * sum(x) of chunk c.
fn chunk(u: Unit, c: u32) -> vec2<f32> {
    let xc = x4(u.xs_base + 4u * c);
    let q = quants(word2(u.ql + 4u * c, u.odd), word2(u.qh + 4u * c, u.odd), u.n, u.hs);
    let sc = select(u.scales.y, u.scales.x, c < 4u);
    return sc * vec2<f32>(dot(q, xc), dot(xc, vec4<f32>(1.0)));
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let o = row_byte + (unit >> 3u) * 210u;
    let s = unit & 7u;
    let h = s >> 2u;
    let r = s & 3u;
    // The unit's two i8 scales are adjacent, at a 2-aligned offset.
    let sb = o + 192u + 8u * h + 2u * r;
    let scales = bitcast<i32>(w[sb >> 2u] >> (8u * (sb & 2u)));
    let db = o + 208u;
    let d = unpack2x16float(w[db >> 2u] >> (8u * (db & 2u))).x;
    let u = Unit(
        o + 64u * h + 32u * (r & 1u),
        o + 128u + 32u * h,
        (o & 2u) != 0u,
        4u * (r >> 1u),
        2u * r,
        vec2<f32>(f32(extractBits(scales, 0u, 8u)), f32(extractBits(scales, 8u, 8u))),
        xs_base,
    );
    let rot = unit >> 1u;
    // Eight chunks in a row rather than a loop (naga guards every loop with a counter,
    // which can keep the driver from unrolling it).
    let acc = chunk(u, rot & 7u) + chunk(u, (rot + 1u) & 7u) + chunk(u, (rot + 2u) & 7u)
        + chunk(u, (rot + 3u) & 7u) + chunk(u, (rot + 4u) & 7u) + chunk(u, (rot + 5u) & 7u)
        + chunk(u, (rot + 6u) & 7u) + chunk(u, (rot + 7u) & 7u);
    return d * (acc.x - 1056.0 * acc.y);
}
