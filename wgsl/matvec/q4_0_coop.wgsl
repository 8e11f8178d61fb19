#include "matvec/coop.wgsl"

// Q4_0: 32 weights per 18-byte block {d: f16, qs: [u8; 16]}; weight j < 16 is the low
// nibble of qs[j], weight j + 16 its high nibble; value = d * (q - 8), so
// dot = d * sum((q - 8) * x) with one multiply by d per block.
//
// Loads: blocks are only 2-byte aligned and alternate between offsets 0 and 2 mod 4 from
// lane to lane, so load_u32's alignment branch would diverge on every load. Each lane
// instead reads the 5 aligned words that hold its block (never a word outside it) and
// picks, with a select, either whole words (block at 2 mod 4: qs starts word-aligned) or
// the halves straddling two words (block at 0 mod 4). The code is straight-line: naga
// puts a guard counter on every loop, which can keep the driver from unrolling it and
// issuing all the loads before the first use.
//
// Conversion: masking a word with 0x0f0f0f0f leaves four nibbles in four bytes, a byte
// OR'd into the mantissa of 2^23 is exactly 2^23 + q, and one subtraction of 2^23 + 8
// yields q - 8, the offset folded in for free. This stays on the FP32 pipe;
// int-to-float conversion runs at a fraction of its rate on NVIDIA.
//
// Order of the x reads: the lanes of a subgroup run consecutive units 32 elements apart,
// so walking each unit front to back puts every lane on the same one or two
// workgroup-memory banks (16-way conflicts with f16 x). Each lane walks its unit's eight
// 4-element chunks starting at chunk r = (unit / 2) % 8, which spreads the lanes over all
// banks. Chunk c is the low (c < 4) or high nibbles of qs word c % 4, so chunks c and
// c ^ 4 share a word: a two-stage rotation by selects moves word (r + s) % 4 into slot
// s, so no register array is indexed at run time, and the nibble half is a shift by c & 4.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// Four nibbles at bits n, n + 8, n + 16, n + 24 of `q`, as floats q - 8.
fn nibbles(q: u32, n: u32) -> vec4<f32> {
    let b = (vec4<u32>((q >> n) & 0x0f0f0f0fu) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4b000000u)) - vec4<f32>(8388616.0);
}

// Chunks c and c ^ 4, both held in qs word `q`.
fn chunk_pair(acc: ptr<function, vec4<f32>>, q: u32, xs_base: u32, c: u32) {
    let n = c & 4u;
    *acc += nibbles(q, n) * x4(xs_base + 4u * c);
    *acc += nibbles(q, n ^ 4u) * x4(xs_base + 4u * (c ^ 4u));
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let b = row_byte + unit * 18u;
    let i0 = b >> 2u;
    let odd = (b & 2u) != 0u;
    let w0 = w[i0];
    let lo = vec4<u32>(w0, w[i0 + 1u], w[i0 + 2u], w[i0 + 3u]);
    let hi = vec4<u32>(lo.yzw, w[i0 + 4u]);
    let s16 = vec4<u32>(16u);
    let q = select((lo >> s16) | (hi << s16), hi, odd);

    let r = (unit >> 1u) & 7u;
    let q1 = select(q, q.yzwx, (r & 1u) != 0u);
    let q2 = select(q1, q1.zwxy, (r & 2u) != 0u);

    var acc = vec4<f32>(0.0);
    chunk_pair(&acc, q2.x, xs_base, r);
    chunk_pair(&acc, q2.y, xs_base, (r + 1u) & 7u);
    chunk_pair(&acc, q2.z, xs_base, (r + 2u) & 7u);
    chunk_pair(&acc, q2.w, xs_base, (r + 3u) & 7u);
    let dd = unpack2x16float(w0);
    return select(dd.x, dd.y, odd) * dot(acc, vec4<f32>(1.0));
}
