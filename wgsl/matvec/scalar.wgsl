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

#include "matvec/bytes.wgsl"

struct Params {
    m: u32,          // rows in this dispatch
    k: u32,          // columns
    row_bytes: u32,  // bytes per weight row
    y_offset: u32,   // first output element written by this dispatch
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = (wid.y * groups.x + wid.x) * 64u + lid;
    if (row >= params.m) {
        return;
    }
    y[params.y_offset + row] = row_dot(row * params.row_bytes);
}
