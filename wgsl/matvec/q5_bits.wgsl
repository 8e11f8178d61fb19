// Shared by the Q5_0 and Q5_1 kernels of the coop and dot4 families: a block's qh is a
// little-endian u32 of fifth bits, bit j for weight j (the low nibble of qs byte j) and
// bit j + 16 for weight j + 16 (its high nibble).

// The low 4 bits of `bits` moved to bit 4 of each byte: the fifth bits of four quants.
// Multiplying by 1 + 2^7 + 2^14 + 2^21 puts a copy of bit i at bit 8i (from the 2^(7i)
// term); no two copies land on the same bit, so nothing carries, and the mask keeps
// only bits 0, 8, 16 and 24.
fn fifth_bits(bits: u32) -> u32 {
    return (((bits & 0xfu) * 0x00204081u) & 0x01010101u) << 4u;
}

// Four 5-bit quants, one per byte: the nibbles at bit n of each byte of qs word `q`
// (n = 0 for weights below 16, 4 above), topped by the qh bits from bit `first` on.
fn q5_word(q: u32, n: u32, qh: u32, first: u32) -> u32 {
    return ((q >> n) & 0x0f0f0f0fu) | fifth_bits(qh >> first);
}

// All 32 quants of a block as int8, weights 0..16 and 16..32, from its 16 qs bytes.
fn quants5(qs: vec4<u32>, qh: u32) -> array<vec4<u32>, 2> {
    return array<vec4<u32>, 2>(
        vec4<u32>(q5_word(qs.x, 0u, qh, 0u), q5_word(qs.y, 0u, qh, 4u),
                  q5_word(qs.z, 0u, qh, 8u), q5_word(qs.w, 0u, qh, 12u)),
        vec4<u32>(q5_word(qs.x, 4u, qh, 16u), q5_word(qs.y, 4u, qh, 20u),
                  q5_word(qs.z, 4u, qh, 24u), q5_word(qs.w, 4u, qh, 28u)),
    );
}
