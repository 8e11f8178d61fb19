// Shared by the Q4_K and Q5_K kernels that read matvec::Layout::KScalesByPair (the
// dot4 matvecs and the matmuls): the 6-bit scales and minimums of sub-blocks 2p and
// 2p + 1 of the super-block whose first 16 bytes are `hdr`. Byte p of hdr.y, hdr.z and
// hdr.w holds the pair's scales and sub-block 2p's minimum in its low 6 bits, and
// sub-block 2p + 1's minimum in their top 2 bits. Returns (sc_2p, sc_2p+1, m_2p, m_2p+1).
fn k_pair_scales(hdr: vec4<u32>, p: u32) -> vec4<u32> {
    let sh = 8u * p;
    let a = hdr.y >> sh;
    let b = hdr.z >> sh;
    let c = hdr.w >> sh;
    return vec4<u32>(a & 63u, b & 63u, c & 63u,
                     ((a >> 6u) & 3u) | ((b >> 4u) & 12u) | ((c >> 2u) & 48u));
}
