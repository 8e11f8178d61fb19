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
// Byte reads over the includer's `w: array<u32>`, for the kernels that decode GGUF blocks
// a weight at a time (the scalar matvecs, the fma matmuls) and the dot4 kernels' word
// reads (bytes_dot4.wgsl). Each reads only the word that holds its bytes: blocks of 18,
// 20, 22, 24, 34 and 210 bytes leave rows only 2-byte aligned, and a part's last row
// may end where its binding does.

fn load_byte(byte: u32) -> u32 {
    return (w[byte >> 2u] >> ((byte & 3u) * 8u)) & 0xffu;
}

// WGSL has no i8: the byte is moved to the top of an i32 and shifted back
// arithmetically, which sign-extends it.
fn load_i8(byte: u32) -> i32 {
    return bitcast<i32>(load_byte(byte) << 24u) >> 24u;
}

// The f16 at 2-aligned byte offset `byte`, widened. Every f16 of a GGUF row is 2-byte
// aligned (blocks and their fields have even sizes), so it lies in one word.
fn load_f16(byte: u32) -> f32 {
    return unpack2x16float(w[byte >> 2u] >> (8u * (byte & 2u))).x;
}
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

// Q4_0: 32 weights per 18-byte block {d: f16, qs: [u8; 16]}; weight i is the low nibble
// of qs[i], weight i + 16 its high nibble, value d * (q - 8). As uploaded for
// matvec/q4_0_dot4 (the GGUF bytes); blocks are 2-byte aligned.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let o = row_byte + g * 18u;
    let qs = piece(o + 2u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    return WGroup(qs & m4, (qs >> vec4<u32>(4u)) & m4, vec2<f32>(load_f16(o)), -8, 0.0);
}
