// Shared by the Q5_K kernels that read matvec::Layout::Q5kByPair (the dot4 matvec and
// the matmul).

// The 5-bit quants of a sub-block, words 0..4 and 4..8: its nibbles (`n0`, `n1`, at
// bits 0..4 of each byte) topped by the fifth bits of qh word `h`. Word k's bits sit at
// 8b + k and go to 8b + 4: up by 4 - k for the first four words, down by k - 4 after.
fn quants(n0: vec4<u32>, n1: vec4<u32>, h: u32) -> array<vec4<u32>, 2> {
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m5 = vec4<u32>(0x10101010u);
    let hv = vec4<u32>(h);
    return array<vec4<u32>, 2>(
        (n0 & m4) | ((hv << vec4<u32>(4u, 3u, 2u, 1u)) & m5),
        (n1 & m4) | ((hv >> vec4<u32>(0u, 1u, 2u, 3u)) & m5),
    );
}
