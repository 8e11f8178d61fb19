#include "matvec/coop.wgsl"
#include "matvec/q5_bits.wgsl"

// Q5_0: 32 weights per 22-byte block {d: f16, qh: [u8; 4], qs: [u8; 16]}. qh is a
// little-endian u32 of fifth bits: weight j < 16 is the low nibble of qs[j] with bit j
// of qh on top, weight j + 16 the high nibble with bit j + 16; value = d * (q - 16), so
// dot = d * sum((q - 16) * x) with one multiply by d per block.
//
// Loads: blocks are only 2-byte aligned and alternate between offsets 0 and 2 mod 4 from
// lane to lane, so load_u32's alignment branch would diverge on every load. Each lane
// instead reads the 6 aligned words that hold its block (never a word outside it) and
// picks, with a select, either whole words (block at 2 mod 4: qh and qs start
// word-aligned) or the halves straddling two words (block at 0 mod 4). The code is
// straight-line: naga puts a guard counter on every loop, which can keep the driver from
// unrolling it and issuing all the loads before the first use.
//
// Conversion: four 5-bit values are assembled in the four bytes of a word, the nibbles by
// a mask and the four matching qh bits spread to bit 4 of each byte by one multiply (see
// `fifth_bits` in q5_bits.wgsl). A byte OR'd into the mantissa of 2^23 is exactly 2^23 + q, and one
// subtraction of 2^23 + 16 yields q - 16, the offset folded in for free. This stays on the
// FP32 pipe; int-to-float conversion runs at a fraction of its rate on NVIDIA.
//
// Order of the x reads: the lanes of a subgroup run consecutive units 32 elements apart,
// so walking each unit front to back puts every lane on the same one or two
// workgroup-memory banks (16-way conflicts with f16 x). Each lane walks its unit's eight
// 4-element chunks starting at chunk r = (unit / 2) % 8, which spreads the lanes over all
// banks. Chunk c is the low (c < 4) or high nibbles of qs word c % 4, with its fifth bits
// at bits 4c.. of qh in both cases, so chunks c and c ^ 4 share a word: a two-stage
// rotation by selects moves word (r + s) % 4 into slot s, so no register array is indexed
// at run time, and the nibble half is a shift by c & 4.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// Chunk c's four 5-bit values (nibbles at bit n of each byte of `q`) as floats q - 16.
fn quints(q: u32, n: u32, qh: u32, c: u32) -> vec4<f32> {
    let v = q5_word(q, n, qh, 4u * c);
    let b = (vec4<u32>(v) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4b000000u)) - vec4<f32>(8388624.0);
}

// Chunks c and c ^ 4, both held in qs word `q`.
fn chunk_pair(acc: ptr<function, vec4<f32>>, q: u32, qh: u32, xs_base: u32, c: u32) {
    let n = c & 4u;
    *acc += quints(q, n, qh, c) * x4(xs_base + 4u * c);
    *acc += quints(q, n ^ 4u, qh, c ^ 4u) * x4(xs_base + 4u * (c ^ 4u));
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let b = row_byte + unit * 22u;
    let i0 = b >> 2u;
    let odd = (b & 2u) != 0u;
    let w0 = w[i0];
    let w1 = w[i0 + 1u];
    let lo = vec4<u32>(w1, w[i0 + 2u], w[i0 + 3u], w[i0 + 4u]);
    let hi = vec4<u32>(lo.yzw, w[i0 + 5u]);
    let s16 = vec4<u32>(16u);
    let qh = select((w0 >> 16u) | (w1 << 16u), w1, odd);
    let q = select((lo >> s16) | (hi << s16), hi, odd);

    let r = (unit >> 1u) & 7u;
    let q1 = select(q, q.yzwx, (r & 1u) != 0u);
    let q2 = select(q1, q1.zwxy, (r & 2u) != 0u);

    var acc = vec4<f32>(0.0);
    chunk_pair(&acc, q2.x, qh, xs_base, r);
    chunk_pair(&acc, q2.y, qh, xs_base, (r + 1u) & 7u);
    chunk_pair(&acc, q2.z, qh, xs_base, (r + 2u) & 7u);
    chunk_pair(&acc, q2.w, qh, xs_base, (r + 3u) & 7u);
    let dd = unpack2x16float(w0);
    return select(dd.x, dd.y, odd) * dot(acc, vec4<f32>(1.0));
}
