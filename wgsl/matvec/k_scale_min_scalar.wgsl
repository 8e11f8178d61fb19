// Shared by the Q4_K and Q5_K scalar matvecs and fma matmuls: the 6-bit scale and
// minimum of a sub-block, packed in the super-block's 12 `scales` bytes (ggml's
// get_scale_min_k4).

// (sc, m) of sub-block j of the super-block at byte b.
fn scale_min(b: u32, j: u32) -> vec2<u32> {
    let scales = b + 4u;
    if (j < 4u) {
        return vec2<u32>(load_byte(scales + j) & 63u, load_byte(scales + j + 4u) & 63u);
    }
    let low = load_byte(scales + j + 4u);
    return vec2<u32>(
        (low & 15u) | ((load_byte(scales + j - 4u) >> 6u) << 4u),
        (low >> 4u) | ((load_byte(scales + j) >> 6u) << 4u),
    );
}
