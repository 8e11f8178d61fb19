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
// Matvec driver, scalar family: y[row] = dot(W[row, :], x).
//
// The WGSL port of what SPIRV-Cross emits for a plain GLSL matvec: one invocation per
// row, 64 rows per workgroup, weights read a byte at a time, x read from device memory
// by every invocation. It needs nothing beyond core WGSL, so it is the universal
// fallback and the baseline the coop family is measured against.
//
// The per-type file, which includes this one, defines
//   fn row_dot(row_byte: u32) -> f32
// using bytes.wgsl's load_byte / load_i8 / load_f16 and reading x directly.


struct Params {
    m: u32,          // rows in this dispatch
    k: u32,          // columns
    row_bytes: u32,  // bytes per weight row
    y_offset: u32,   // first output element written by this dispatch
    cols: u32,       // columns of x (and of y) this dispatch multiplies
    x_stride: u32,   // from one x column to the next, in elements
    y_stride: u32,   // from one y column to the next, in elements
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// Columns: y_c = W x_c for c < params.cols, each row's columns one after another, so
// that a column's arithmetic is the same code whatever params.cols (a runtime bound the
// driver cannot specialize) and the row's bytes come from cache after the first. The
// element of x where the current column starts; the per-type files add it to every
// read of x.
var<private> x_col: u32;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = (wid.y * groups.x + wid.x) * 64u + lid;
    if (row >= params.m) {
        return;
    }
    for (var c = 0u; c < params.cols; c++) {
        x_col = c * params.x_stride;
        y[params.y_offset + c * params.y_stride + row] = row_dot(row * params.row_bytes);
    }
}

// Q8_0: 32 weights per 34-byte block {d: f16, qs: [i8; 32]}; value = d * qs[j].
fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var blk = 0u; blk < params.k / 32u; blk++) {
        let b = row_byte + blk * 34u;
        let d = load_f16(b);
        for (var j = 0u; j < 32u; j++) {
            let q = load_i8(b + 2u + j);
            acc += (d * f32(q)) * x[x_col + blk * 32u + j];
        }
    }
    return acc;
}
