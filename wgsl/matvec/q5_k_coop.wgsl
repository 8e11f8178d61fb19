#include "matvec/coop.wgsl"
#include "matvec/k_scale_min_coop.wgsl"

// Q5_K: 256 weights per 176-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]}
// = words 0 (d, dmin), 1..4 (scales), 4..12 (qh), 12..44 (qs). A unit is sub-block
// s = unit % 8 of super-block unit / 8: 6-bit scale sc and minimum m from `scales` (ggml's
// get_scale_min_k4), weight l = nibble s & 1 of qs[32 * (s / 2) + l] with bit s of qh[l]
// as bit 4, value = d * sc * q - dmin * m.
//
// Algebra: sum(w * x) = d * sc * sum(q * x) - dmin * m * sum(x), so the scale and minimum
// are applied once per unit. The 5-bit quants are assembled two at a time in the
// mantissas of a pair of f16 1024.0 (0x6400) and widened with unpack2x16float, which gives
// 1024 + q exactly without int-to-float conversions (a fraction of the FMA rate on
// NVIDIA); the offset folds into the sum of x: sum(q * x) = sum((1024 + q) * x) - 1024 *
// sum(x).
//
// Every 176-byte block starts 16-byte aligned, so all fields are read as whole words. A
// unit reads all 32 bytes of its qs pair and of qh but uses one bit field of each; the
// rest belongs to the neighbouring lanes' units, so DRAM traffic is unchanged.
//
// Order of the x reads: as in q4_k_coop.wgsl, each lane starts at chunk (unit / 2) % 8 of
// its eight 4-element chunks so the lanes of a subgroup do not all hit the same
// workgroup-memory banks.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// 1024 + the four 5-bit quants of a chunk: nibbles at bits n + 8k of `qs`, fifth bits at
// bits s + 8k of `qh` (k = 0..4).
fn quants(qs: u32, qh: u32, n: u32, s: u32) -> vec4<f32> {
    let t = qh >> s;
    let even = unpack2x16float(((qs >> n) & 0x000f000fu) | ((t << 4u) & 0x00100010u) | 0x64006400u);
    let odd = unpack2x16float(((qs >> (n + 8u)) & 0x000f000fu) | ((t >> 4u) & 0x00100010u) | 0x64006400u);
    return vec4<f32>(even.x, odd.x, even.y, odd.y);
}

// One 4-element chunk: sum((1024 + q) * x) into f and sum(x) into sx. Called eight times
// in a row rather than looped (naga guards every loop with a counter, which can keep the
// driver from unrolling it).
fn chunk(f: ptr<function, vec4<f32>>, sx: ptr<function, vec4<f32>>, blk: u32, qs: u32, n: u32, s: u32, xs_base: u32, c: u32) {
    let xc = x4(xs_base + 4u * c);
    *f += quants(w[qs + c], w[blk + 4u + c], n, s) * xc;
    *sx += xc;
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let s = unit & 7u;
    // Written as a multiple of 4 words so the compiler may see 16-byte alignment.
    let blk = ((row_byte >> 4u) + (unit >> 3u) * 11u) << 2u;
    let dm = unpack2x16float(w[blk]);
    let sm = k_scale_min(blk, s);
    let sc = sm.x;
    let m = sm.y;

    let qs = blk + 12u + 8u * (s >> 1u);
    let n = 4u * (s & 1u);
    let r = unit >> 1u;
    var f = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    chunk(&f, &sx, blk, qs, n, s, xs_base, r & 7u);
    chunk(&f, &sx, blk, qs, n, s, xs_base, (r + 1u) & 7u);
    chunk(&f, &sx, blk, qs, n, s, xs_base, (r + 2u) & 7u);
    chunk(&f, &sx, blk, qs, n, s, xs_base, (r + 3u) & 7u);
    chunk(&f, &sx, blk, qs, n, s, xs_base, (r + 4u) & 7u);
    chunk(&f, &sx, blk, qs, n, s, xs_base, (r + 5u) & 7u);
    chunk(&f, &sx, blk, qs, n, s, xs_base, (r + 6u) & 7u);
    chunk(&f, &sx, blk, qs, n, s, xs_base, (r + 7u) & 7u);

    let one = vec4<f32>(1.0);
    let dl = dm.x * f32(sc);
    let sum_x = dot(sx, one);
    return dl * dot(f, one) - (1024.0 * dl + dm.y * f32(m)) * sum_x;
}
