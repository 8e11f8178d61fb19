// Shared by the dot4 kernels that read their weights as words (alias W = u32): blocks of
// 18, 22, 34 and 210 bytes leave fields only 2-byte aligned. The alignment of a field
// differs between neighbouring lanes' blocks, so only the lanes that need a second word
// load it.

// The 4 bytes at 2-aligned byte offset `byte`.
fn word_at(byte: u32) -> u32 {
    let i = byte >> 2u;
    let lo = w[i];
    if ((byte & 2u) == 0u) {
        return lo;
    }
    return (lo >> 16u) | (w[i + 1u] << 16u);
}

// The f16 at 2-aligned byte offset `byte`, widened.
fn f16_at(byte: u32) -> f32 {
    return unpack2x16float(w[byte >> 2u] >> (8u * (byte & 2u))).x;
}

// The 16 bytes at 2-aligned byte offset `byte`.
fn piece(byte: u32) -> vec4<u32> {
    let i = byte >> 2u;
    let a = w[i];
    let b = w[i + 1u];
    let c = w[i + 2u];
    let d = w[i + 3u];
    if ((byte & 2u) == 0u) {
        return vec4<u32>(a, b, c, d);
    }
    let e = w[i + 4u];
    return vec4<u32>((a >> 16u) | (b << 16u), (b >> 16u) | (c << 16u),
                     (c >> 16u) | (d << 16u), (d >> 16u) | (e << 16u));
}

// The low 4 bits of `bits` moved to bit 4 of each byte: the fifth bits of four 5-bit
// quants (Q5_0, Q5_1). The multiply places bit i at bit 8i + i, the mask keeps those.
fn fifth_bits(bits: u32) -> u32 {
    return (((bits & 0xfu) * 0x00204081u) & 0x01010101u) << 4u;
}

// The 32 5-bit quants of a Q5_0 or Q5_1 block as int8: weight i (i < 16) is the low
// nibble of qs byte i with bit i of qh on top, weight i + 16 the high nibble with bit
// i + 16. Returns weights 0..16 and 16..32.
fn quants5(qs: vec4<u32>, qh: u32) -> array<vec4<u32>, 2> {
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let lo = (qs & m4) | vec4<u32>(fifth_bits(qh), fifth_bits(qh >> 4u),
                                   fifth_bits(qh >> 8u), fifth_bits(qh >> 12u));
    let hi = ((qs >> vec4<u32>(4u)) & m4) | vec4<u32>(fifth_bits(qh >> 16u), fifth_bits(qh >> 20u),
                                                      fifth_bits(qh >> 24u), fifth_bits(qh >> 28u));
    return array<vec4<u32>, 2>(lo, hi);
}
