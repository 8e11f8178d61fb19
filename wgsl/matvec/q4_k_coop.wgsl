#include "matvec/coop.wgsl"
#include "matvec/k_scale_min_coop.wgsl"

// Q4_K: 256 weights per 144-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]}
// = words 0 (d, dmin), 1..4 (scales), 4..36 (qs). A unit is sub-block s = unit % 8 of
// super-block unit / 8: 6-bit scale sc and minimum m from `scales` (ggml's
// get_scale_min_k4), weight l = nibble s & 1 of qs[32 * (s / 2) + l],
// value = d * sc * q - dmin * m.
//
// Algebra: sum(w * x) = d * sc * sum(q * x) - dmin * m * sum(x), so the scale and minimum
// are applied once per unit. The quants are turned into floats by OR-ing two of them into
// the mantissas of a pair of f16 1024.0 (0x6400) and widening with unpack2x16float,
// which gives 1024 + q exactly for the cost of a shift and a mask per two weights:
// int-to-float conversions run at a fraction of the FMA rate on NVIDIA. The offset folds
// into the sum of x: sum(q * x) = sum((1024 + q) * x) - 1024 * sum(x). That subtraction
// costs about 7 bits of the f32 sum (NMSE ~1e-10 with f32 x), far below what staging x
// as f16 already costs (~5e-8).
//
// Every 144-byte block starts 16-byte aligned (rows are whole blocks), so all fields are
// read as whole words. Each unit reads all 32 bytes of its qs pair and uses one nibble of
// each: the other nibble belongs to the neighbouring lane's unit, so DRAM traffic is
// unchanged and the second read hits L1.
//
// Order of the x reads: the lanes of a subgroup run consecutive units, 32 elements
// apart, so reading each unit front to back puts every lane on the same one or two
// workgroup-memory banks (16-way conflicts with f16 x, 32-way with f32). Each lane walks
// its unit's eight 4-element chunks starting at chunk (unit / 2) % 8 instead: the lanes
// spread over 16 banks (f16, 2-way conflicts) or 8 (f32, 4-way), and the weights follow
// because each chunk's word is loaded by its own index. On the H200 this order alone made
// the kernel 2.2x (f16 x) to 3.3x (f32 x) faster.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// 1024 + the four nibbles at bits n, n + 8, n + 16 and n + 24 of `word`.
fn nibbles(word: u32, n: u32) -> vec4<f32> {
    let even = unpack2x16float(((word >> n) & 0x000f000fu) | 0x64006400u);
    let odd = unpack2x16float(((word >> (n + 8u)) & 0x000f000fu) | 0x64006400u);
    return vec4<f32>(even.x, odd.x, even.y, odd.y);
}

// One 4-element chunk: sum((1024 + q) * x) into f and sum(x) into sx. Called eight times
// in a row rather than looped, since naga puts a guard counter on every loop and that
// can keep the driver from unrolling it and hoisting the loads.
fn chunk(f: ptr<function, vec4<f32>>, sx: ptr<function, vec4<f32>>, qs: u32, n: u32, xs_base: u32, c: u32) {
    let xc = x4(xs_base + 4u * c);
    *f += nibbles(w[qs + c], n) * xc;
    *sx += xc;
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let s = unit & 7u;
    // Written as a multiple of 4 words so the compiler may see 16-byte alignment.
    let blk = ((row_byte >> 4u) + (unit >> 3u) * 9u) << 2u;
    let dm = unpack2x16float(w[blk]);
    let sm = k_scale_min(blk, s);
    let sc = sm.x;
    let m = sm.y;

    let qs = blk + 4u + 8u * (s >> 1u);
    let n = 4u * (s & 1u);
    let r = unit >> 1u;
    var f = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    chunk(&f, &sx, qs, n, xs_base, r & 7u);
    chunk(&f, &sx, qs, n, xs_base, (r + 1u) & 7u);
    chunk(&f, &sx, qs, n, xs_base, (r + 2u) & 7u);
    chunk(&f, &sx, qs, n, xs_base, (r + 3u) & 7u);
    chunk(&f, &sx, qs, n, xs_base, (r + 4u) & 7u);
    chunk(&f, &sx, qs, n, xs_base, (r + 5u) & 7u);
    chunk(&f, &sx, qs, n, xs_base, (r + 6u) & 7u);
    chunk(&f, &sx, qs, n, xs_base, (r + 7u) & 7u);

    let one = vec4<f32>(1.0);
    let dl = dm.x * f32(sc);
    let sum_x = dot(sx, one);
    return dl * dot(f, one) - (1024.0 * dl + dm.y * f32(m)) * sum_x;
}
