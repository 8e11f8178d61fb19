// Q6_K with int8 x: 256 weights per 210-byte super-block
//   {ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16}
// Weight n = 128 h + 32 r + l (h = 0..2, r = 0..4, l = 0..32) takes its low 4 bits from
// nibble r / 2 of ql[64 h + 32 (r % 2) + l], its top 2 bits from bits 2r..2r+2 of
// qh[32 h + l], and value d * scales[8 h + 2 r + l / 16] * (q - 32).
//
// Slice j (0..8) is ql bytes 16j .. 16j + 16, i.e. h = j / 4, r1 = (j / 2) % 2 and
// l = 16 (j % 2) .. + 16: its low nibbles are weights of run r1 and its high nibbles of
// run r1 + 2, each 16 weights under one scale. The eight lanes of a block read its ql as
// one contiguous run.
//
// 210-byte blocks would leave every other block only 2-byte aligned, so the weights
// are uploaded as `Layout::BodiesFirst`: the first 208 bytes {ql, qh, scales} of every
// block of the dispatch's rows, 13 vec4s each, then every block's d. Each field of a
// slice is then one aligned vec4 load, where the GGUF layout took 13 word loads.
//
// sum((q - 32) * xq) = sum(q * xq) - 32 * sum(xq): the quants 0..63 are non-negative
// int8, and the driver keeps sum(xq) per half group.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 8u;
// The eight lanes of a block read halves hh of groups 4h + r1 (and + 2): second
// halves 2 slots on put them on all eight bank sets.
const HALF_SKEW: u32 = 2u;

// sum((q - 32) * xq) over one 16-weight run: nibbles at bit n of `ql`'s bytes, top bits
// at bit t of `qh`'s bytes, against half hh of x group g.
fn run_dot(ql: vec4<u32>, qh: vec4<u32>, n: u32, t: u32, g: u32, hh: u32) -> i32 {
    let q = ((ql >> vec4<u32>(n)) & vec4<u32>(0x0f0f0f0fu))
          | (((qh >> vec4<u32>(t)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    return dot16(q, xq16(g, hh)) - 32 * xsum16(g, hh);
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    // Block n of the binding: rows are whole blocks, so row_byte / 210 blocks precede.
    let n = row_byte / 210u + blk;
    let body = 13u * n;
    let h = j >> 2u;
    let r1 = (j >> 1u) & 1u;
    let hh = j & 1u;
    let ql = w[body + j];
    let qh = w[body + 8u + 2u * h + hh];
    // Scales 8h .. 8h + 8: runs r1 (low nibbles) and r1 + 2 (high) at byte 2 r1 + hh of
    // the half's first and second word.
    let sc = w[body + 12u];
    let sc_lo = select(sc.x, sc.z, h == 1u);
    let sc_hi = select(sc.y, sc.w, h == 1u);
    let sh = 8u * (2u * r1 + hh);
    // d: after the bodies of all m * k / 256 blocks, 2 bytes each.
    let dv = w[13u * params.m * (params.k / BLOCK) + n / 8u];
    let d = unpack2x16float(dv[(n / 2u) % 4u] >> (16u * (n % 2u))).x;
    let glo = g + 4u * h + r1;
    let lo = run_dot(ql, qh, 0u, 2u * r1, glo, hh);
    let hi = run_dot(ql, qh, 4u, 2u * r1 + 4u, glo + 2u, hh);
    return d * (f32(extractBits(bitcast<i32>(sc_lo), sh, 8u)) * xd(glo) * f32(lo)
              + f32(extractBits(bitcast<i32>(sc_hi), sh, 8u)) * xd(glo + 2u) * f32(hi));
}
