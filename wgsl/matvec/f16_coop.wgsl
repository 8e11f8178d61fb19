#include "matvec/coop.wgsl"

// F16 weights: 32 per unit, 2 bytes each.
//
// Loads: a row starts 4-byte aligned whenever K is even (every real model), and then a
// unit is 16 whole words, two weights per word, read by index in straight-line code
// (naga puts a guard counter on every loop, which can keep the driver from unrolling it
// and issuing all the loads before the first use). K need not be a multiple of 32, nor
// even of 2, so the last unit of a row may be partial and with odd K every other row
// starts only 2-byte aligned; those take the element-wise path, which reads only the word
// holding each weight (never past the row, nor past the buffer's end). `row_byte & 2` is
// the same for every lane of a subgroup (one row per subgroup), so the branch does not
// diverge except at a row's partial last unit.
//
// Order of the x reads: the lanes of a subgroup run consecutive units 32 elements apart,
// so walking each unit front to back puts every lane on the same one or two
// workgroup-memory banks (16-way conflicts with f16 x). Each lane walks its unit's eight
// 4-element chunks starting at chunk r = (unit / 2) % 8, which spreads the lanes over all
// banks; the weight words of each chunk are loaded by their own index.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// Chunk c: weights 4c .. 4c + 3, the two words from word `i0 + 2c`.
fn chunk(acc: ptr<function, vec4<f32>>, i0: u32, xs_base: u32, c: u32) {
    let i = i0 + 2u * c;
    *acc += vec4<f32>(unpack2x16float(w[i]), unpack2x16float(w[i + 1u])) * x4(xs_base + 4u * c);
}

fn f16_at(byte: u32) -> f32 {
    let pair = unpack2x16float(w[byte >> 2u]);
    return select(pair.x, pair.y, (byte & 2u) != 0u);
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let first = unit * 32u;
    let b = row_byte + first * 2u;
    if (first + 32u <= params.k && (b & 2u) == 0u) {
        let i0 = b >> 2u;
        let r = (unit >> 1u) & 7u;
        var acc = vec4<f32>(0.0);
        chunk(&acc, i0, xs_base, r);
        chunk(&acc, i0, xs_base, (r + 1u) & 7u);
        chunk(&acc, i0, xs_base, (r + 2u) & 7u);
        chunk(&acc, i0, xs_base, (r + 3u) & 7u);
        chunk(&acc, i0, xs_base, (r + 4u) & 7u);
        chunk(&acc, i0, xs_base, (r + 5u) & 7u);
        chunk(&acc, i0, xs_base, (r + 6u) & 7u);
        chunk(&acc, i0, xs_base, (r + 7u) & 7u);
        return dot(acc, vec4<f32>(1.0));
    }
    let n = min(32u, params.k - first);
    var acc = 0.0;
    for (var j = 0u; j < n; j++) {
        acc += f16_at(b + 2u * j) * xv(xs_base + j);
    }
    return acc;
}
