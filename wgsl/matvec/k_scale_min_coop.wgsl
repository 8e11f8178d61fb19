// Shared by the Q4_K and Q5_K coop kernels: (sc, m), the 6-bit scale and minimum of
// sub-block s of the super-block whose first word is w[blk], from whole-word reads of
// its 12 `scales` bytes (ggml's get_scale_min_k4).
fn k_scale_min(blk: u32, s: u32) -> vec2<u32> {
    // Byte s % 4 of each scales word: scales[s % 4], scales[s % 4 + 4], scales[s % 4 + 8].
    let sh = 8u * (s & 3u);
    let a = w[blk + 1u] >> sh;
    let b = w[blk + 2u] >> sh;
    let c = w[blk + 3u] >> sh;
    let upper = s >= 4u;
    return vec2<u32>(
        select(a & 63u, (c & 15u) | ((a >> 2u) & 48u), upper),
        select(b & 63u, ((c >> 4u) & 15u) | ((b >> 2u) & 48u), upper),
    );
}
