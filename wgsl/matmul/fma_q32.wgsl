// Shared by the fma matmuls of the 32-weight types with nibble quants (Q4_0, Q4_1, Q5_0,
// Q5_1): a block's 16 qs bytes hold weight j < 16 in the low nibble of byte j and weight
// j + 16 in its high nibble; Q5's little-endian u32 qh holds bit 4 of weight j at bit j.

// The 4-bit quant of weight j (< 32) of the block whose qs start at byte `qs`.
fn nibble_at(qs: u32, j: u32) -> u32 {
    return (load_byte(qs + j % 16u) >> (4u * (j / 16u))) & 15u;
}

// The 5-bit quant of weight j: its nibble topped by bit j of the qh at byte `qh`, read
// from the one qh byte holding it.
fn quant5_at(qh: u32, qs: u32, j: u32) -> u32 {
    return nibble_at(qs, j) | (((load_byte(qh + j / 8u) >> (j % 8u)) & 1u) << 4u);
}
