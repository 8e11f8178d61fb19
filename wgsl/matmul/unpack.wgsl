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

#include "matmul/io.wgsl"
#include "matmul/group_values.wgsl"

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
