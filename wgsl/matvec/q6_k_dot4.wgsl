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
// 210-byte blocks leave every other block (and row) only 2-byte aligned, so the binding
// is read as words (bytes_dot4.wgsl); the shift is the same for every field of a block.
//
// sum((q - 32) * xq) = sum(q * xq) - 32 * sum(xq): the quants 0..63 are non-negative
// int8 and dot4I8Packed(0x01010101, xq) sums the x bytes.

alias W = u32;
const BLOCK: u32 = 256u;
const SLICES: u32 = 8u;

// sum((q - 32) * xq) over one 16-weight run: nibbles at bit n of `ql`'s bytes, top bits
// at bit t of `qh`'s bytes.
fn run_dot(ql: vec4<u32>, qh: vec4<u32>, n: u32, t: u32, xv: vec4<u32>) -> i32 {
    let q = ((ql >> vec4<u32>(n)) & vec4<u32>(0x0f0f0f0fu))
          | (((qh >> vec4<u32>(t)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    return dot16(q, xv) - 32 * dot16(vec4<u32>(0x01010101u), xv);
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    let o = row_byte + blk * 210u;
    let h = j >> 2u;
    let r1 = (j >> 1u) & 1u;
    let hh = j & 1u;
    let ql = piece(o + 16u * j);
    let qh = piece(o + 128u + 32u * h + 16u * hh);
    // The half's eight scales: runs r1 (low nibbles) and r1 + 2 (high) at byte
    // 2 r1 + hh of the first and second word.
    let sb = o + 192u + 8u * h;
    let si = sb >> 2u;
    let s0 = w[si];
    let s1 = w[si + 1u];
    let odd = (sb & 2u) != 0u;
    let sc_lo = select(s0, (s0 >> 16u) | (s1 << 16u), odd);
    let sc_hi = select(s1, (s1 >> 16u) | (w[si + 2u] << 16u), odd);
    let sh = 8u * (2u * r1 + hh);
    let d = f16_at(o + 208u);
    let glo = g + 4u * h + r1;
    let lo = run_dot(ql, qh, 0u, 2u * r1, xq16(glo, hh));
    let hi = run_dot(ql, qh, 4u, 2u * r1 + 4u, xq16(glo + 2u, hh));
    return d * (f32(extractBits(bitcast<i32>(sc_lo), sh, 8u)) * xd[glo] * f32(lo)
              + f32(extractBits(bitcast<i32>(sc_hi), sh, 8u)) * xd[glo + 2u] * f32(hi));
}
