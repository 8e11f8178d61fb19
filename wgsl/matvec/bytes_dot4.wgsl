// Shared by the dot4 kernels that read their weights as words (alias W = u32): blocks of
// 18, 22, 34 and 210 bytes leave fields only 2-byte aligned. The alignment of a field
// differs between neighbouring lanes' blocks, so only the lanes that need a second word
// load it.

#include "matvec/bytes.wgsl"

// The 4 bytes at 2-aligned byte offset `byte`.
fn word_at(byte: u32) -> u32 {
    let i = byte >> 2u;
    let lo = w[i];
    if ((byte & 2u) == 0u) {
        return lo;
    }
    return (lo >> 16u) | (w[i + 1u] << 16u);
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
