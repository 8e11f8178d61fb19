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

// Q5_1: 32 weights per 24-byte block {d: f16, m: f16, qh: [u8; 4], qs: [u8; 16]};
// quants as in Q5_0 (q5_0_dot4.wgsl), value d * q + m. As uploaded for
// matvec/q5_1_dot4 (the GGUF bytes); 24-byte blocks keep every field whole words.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let i = (row_byte >> 2u) + g * 6u;
    let dm = unpack2x16float(w[i]);
    let qs = vec4<u32>(w[i + 2u], w[i + 3u], w[i + 4u], w[i + 5u]);
    let q = quants5(qs, w[i + 1u]);
    return WGroup(q[0], q[1], vec2<f32>(dm.x), 0, dm.y);
}
