enable f16;
alias CT = f16;

// A matmul's parameters, its weight binding and its weight decoders' contract, shared
// by the drivers (dot4.wgsl, coopmat.wgsl, columns.wgsl, unpack.wgsl), which declare
// what else they bind, and the per-type decoders (<type>.wgsl), which define
//   alias W                   the weight binding's element (u32 or vec4<u32>)
//   fn weight_group(row_byte: u32, g: u32) -> WGroup
// group g (weights 32g .. 32g + 32) of the row starting at byte `row_byte`, reading the
// layout its dot4 matvec uploads (the two share the weight buffers).

struct Params {
    m: u32,          // rows in this dispatch (its weight part)
    k: u32,          // columns
    row_bytes: u32,  // bytes per weight row
    y_offset: u32,   // output element of row 0 of this dispatch within a token's row of y
    n_tokens: u32,
    x_stride: u32,   // vec4s per token in x (6 per group of 32, q8_x.wgsl)
    y_stride: u32,   // floats per token in y
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<W>;

// 32 weights: int8 quants q (lo: weights 0..16, four per word, hi: 16..32), value
// scale[h] * (q + offset) + min for the weights of half h. Every type fits this form:
// Q4_0 and Q5_0 (offset -8, -16), Q4_1 and Q5_1 (min), Q8_0, the K-quants' sub-block
// scales and minimums, and Q6_K's 16-weight scales (a scale per half, offset -32).
struct WGroup {
    lo: vec4<u32>,
    hi: vec4<u32>,
    scale: vec2<f32>,
    offset: i32,
    min: f32,
}
// The one formula for the drivers that turn a weight group (io.wgsl's WGroup) into the
// values they multiply on the matrix units (coop_staging.wgsl, unpack.wgsl).

// Four of a group's values, those of the int8 quants of word q: scale * (q + offset) +
// min.
fn group_values4(q: u32, scale: f32, offset: i32, min: f32) -> vec4<f32> {
    return vec4<f32>(unpack4xI8(q) + vec4<i32>(offset)) * scale + min;
}
// Unpacking driver: a matrix's weights decoded once into rows of CT (f16, or f32 where
// the adapter multiplies only f32), for unpacked.wgsl to multiply straight from memory
// on the matrix units. coopmat.wgsl decodes every weight group once per tile of tokens,
// in the same arithmetic; this decodes it once per batch.
//
// One invocation decodes one group of 32 weights (its type's decoder) and writes its
// 32 values; neighbouring invocations take neighbouring groups of a row, so the writes
// are contiguous. Params as io.wgsl's: m, k and row_bytes of the dispatch's weight
// part, y_offset its first row in the output (row r's values at r * k). Output rows
// past the matrix's (up to a whole tile) are never written: the buffer starts zeroed,
// and unpacked.wgsl stores no output of theirs.
//
// The kernel file (`<type>_unpack.wgsl`) includes this and its type's decoder
// (`<type>.wgsl`). The host prepends the `f16` enable where CT is f16, and `alias CT`.
// Workgroups: a grid of x by y over the part's groups, WG each.


const WG: u32 = 64u;

@group(0) @binding(2) var<storage, read_write> out: array<vec4<CT>>;

// 16 values scale * (q + offset) + min from four words of int8 quants, to out[at..at + 4]:
// group_values4, as coopmat.wgsl stages the values it multiplies.
fn put16(at: u32, q: vec4<u32>, scale: f32, offset: i32, min: f32) {
    for (var i = 0u; i < 4u; i++) {
        out[at + i] = vec4<CT>(group_values4(q[i], scale, offset, min));
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let groups = params.k / 32u;
    let i = (wid.y * grid.x + wid.x) * WG + lid;
    if (i >= params.m * groups) {
        return;
    }
    let r = i / groups;
    let g = i % groups;
    let q = weight_group(r * params.row_bytes, g);
    let at = (params.y_offset + r) * (params.k / 4u) + 8u * g;
    put16(at, q.lo, q.scale.x, q.offset, q.min);
    put16(at + 4u, q.hi, q.scale.y, q.offset, q.min);
}
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

// Q5_K: 256 weights per 176-byte super-block {d: f16, dmin: f16, scales: [u8; 12],
// qh: [u8; 32], qs: [u8; 128]}, as uploaded for matvec/q5_k_dot4
// (matvec::Layout::Q5kByPair): eleven 16-byte pieces, the header, two of qh (word s
// holds sub-block s's fifth bits) and eight of qs. Group s (0..8) of a block is
// sub-block s: nibbles as in Q4_K (q4_k_dot4.wgsl), value d * sc * q - dmin * m.

alias W = vec4<u32>;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let base = (row_byte >> 4u) + (g / 8u) * 11u;
    let s = g % 8u;
    let p = s / 2u;
    let hdr = w[base];
    let n = vec4<u32>(4u * (s & 1u));
    let qh = w[base + 1u + s / 4u][s % 4u];
    let q = quants(w[base + 3u + 2u * p] >> n, w[base + 4u + 2u * p] >> n, qh);
    let sm = k_pair_scales(hdr, p);
    let odd = (s & 1u) == 1u;
    let dm = unpack2x16float(hdr.x);
    let sc = dm.x * f32(select(sm.x, sm.y, odd));
    return WGroup(q[0], q[1], vec2<f32>(sc), 0, -dm.y * f32(select(sm.z, sm.w, odd)));
}
