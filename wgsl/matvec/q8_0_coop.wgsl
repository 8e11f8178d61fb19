#include "matvec/coop.wgsl"

// Q8_0: 32 weights per 34-byte block {d: f16, qs: [i8; 32]}; value = d * qs[j], so
// dot = d * sum(qs[j] * x[j]) with one multiply by d per block.
//
// Loads: blocks are only 2-byte aligned and alternate between offsets 0 and 2 mod 4 from
// lane to lane, so load_u32's alignment branch would diverge on every load. Each lane
// instead reads the 9 aligned words that hold its block (never a word outside it) and
// picks, with a select, either whole words (block at 2 mod 4: qs starts word-aligned) or
// the halves straddling two words (block at 0 mod 4). The code is straight-line: naga
// puts a guard counter on every loop, which can keep the driver from unrolling it and
// issuing all the loads before the first use.
//
// Conversion: flipping the sign bit maps i8 q to the byte q + 128, and a byte OR'd into
// the mantissa of 2^23 is exactly 2^23 + byte, so one subtraction of 2^23 + 128 yields q.
// This stays on the FP32 pipe; int-to-float conversion runs at a fraction of its rate on
// NVIDIA.
//
// Order of the x reads: the lanes of a subgroup run consecutive units 32 elements apart,
// so walking each unit front to back puts every lane on the same one or two
// workgroup-memory banks (16-way conflicts with f16 x). Each lane walks its unit's eight
// 4-element chunks starting at chunk r = (unit / 2) % 8, which spreads the lanes over all
// banks. The qs words follow: a three-stage rotation by selects moves word (r + s) % 8
// into slot s, so no register array is indexed at run time.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// One chunk: the 4 weights of qs word `q` times x chunk `c`.
fn chunk(acc: ptr<function, vec4<f32>>, q: u32, xs_base: u32, c: u32) {
    let b = (vec4<u32>(q ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    let v = bitcast<vec4<f32>>(b | vec4<u32>(0x4b000000u)) - vec4<f32>(8388736.0);
    *acc += v * x4(xs_base + 4u * c);
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let b = row_byte + unit * 34u;
    let i0 = b >> 2u;
    let odd = (b & 2u) != 0u;
    let w0 = w[i0];
    let lo_a = vec4<u32>(w0, w[i0 + 1u], w[i0 + 2u], w[i0 + 3u]);
    let lo_b = vec4<u32>(w[i0 + 4u], w[i0 + 5u], w[i0 + 6u], w[i0 + 7u]);
    let hi_a = vec4<u32>(lo_a.yzw, lo_b.x);
    let hi_b = vec4<u32>(lo_b.yzw, w[i0 + 8u]);
    let s16 = vec4<u32>(16u);
    // qs words 0..3 and 4..7.
    let qa = select((lo_a >> s16) | (hi_a << s16), hi_a, odd);
    let qb = select((lo_b >> s16) | (hi_b << s16), hi_b, odd);

    let r = (unit >> 1u) & 7u;
    let r1 = (r & 1u) != 0u;
    let a1 = select(qa, vec4<u32>(qa.yzw, qb.x), r1);
    let b1 = select(qb, vec4<u32>(qb.yzw, qa.x), r1);
    let r2 = (r & 2u) != 0u;
    let a2 = select(a1, vec4<u32>(a1.zw, b1.xy), r2);
    let b2 = select(b1, vec4<u32>(b1.zw, a1.xy), r2);
    let r4 = (r & 4u) != 0u;
    let a3 = select(a2, b2, r4);
    let b3 = select(b2, a2, r4);

    var acc = vec4<f32>(0.0);
    chunk(&acc, a3.x, xs_base, r);
    chunk(&acc, a3.y, xs_base, (r + 1u) & 7u);
    chunk(&acc, a3.z, xs_base, (r + 2u) & 7u);
    chunk(&acc, a3.w, xs_base, (r + 3u) & 7u);
    chunk(&acc, b3.x, xs_base, (r + 4u) & 7u);
    chunk(&acc, b3.y, xs_base, (r + 5u) & 7u);
    chunk(&acc, b3.z, xs_base, (r + 6u) & 7u);
    chunk(&acc, b3.w, xs_base, (r + 7u) & 7u);
    let dd = unpack2x16float(w0);
    return select(dd.x, dd.y, odd) * dot(acc, vec4<f32>(1.0));
}
