// Matvec driver, subgroup-cooperative family: y[row] = dot(W[row, :], x).
//
// One subgroup per row. The workgroup stages a K-tile of x once in workgroup memory
// (as XS, f16 where the device has it) and every subgroup reuses it for its row; the
// lanes of a subgroup split the row into 32-element units and meet in subgroupAdd.
// Tiles are sized by the host from the device's workgroup-storage limit, so any K
// works. The subgroup size is only known here at run time (wgpu cannot force it), so
// rows are assigned from `num_subgroups` with a grid-stride loop over row batches:
// correct for any subgroup size and any number of workgroups.
//
// The host prepends the constants WG (invocations), TILE (x elements per tile, a
// multiple of the block size) and the alias XS; the per-type file appended after this
// one defines
//   fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32
// the dot product of 32 consecutive weights (unit `unit` of the row) with
// xs[xs_base .. xs_base + 32].

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

var<workgroup> xs: array<XS, TILE>;

// A 32-bit load at any 2-byte-aligned byte offset (quant blocks of 18, 22, 34 and 210
// bytes leave rows and fields only 2-byte aligned).
fn load_u32(byte: u32) -> u32 {
    let i = byte >> 2u;
    let shift = (byte & 3u) * 8u;
    if (shift == 0u) {
        return w[i];
    }
    return (w[i] >> shift) | (w[i + 1u] << (32u - shift));
}

fn load_f16(byte: u32) -> f32 {
    return unpack2x16float(load_u32(byte)).x;
}

fn xv(i: u32) -> f32 {
    return f32(xs[i]);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg_id: u32,
        @builtin(num_subgroups) n_sg: u32,
        @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) sg_size: u32) {
    let n_units = (params.k + 31u) / 32u;
    for (var base = wid.x * n_sg; base < params.m; base += groups.x * n_sg) {
        let row = base + sg_id;
        let row_ok = row < params.m;
        let row_byte = row * params.row_bytes;
        var acc = 0.0;
        for (var t0 = 0u; t0 < params.k; t0 += TILE) {
            workgroupBarrier();
            for (var i = lid; i < TILE; i += WG) {
                let gi = t0 + i;
                var v = 0.0;
                if (gi < params.k) {
                    v = x[gi];
                }
                xs[i] = XS(v);
            }
            workgroupBarrier();
            if (row_ok) {
                let u0 = t0 / 32u;
                let u_end = min(u0 + TILE / 32u, n_units);
                for (var u = u0 + lane; u < u_end; u += sg_size) {
                    acc += unit_dot(row_byte, u, (u - u0) * 32u);
                }
            }
        }
        // Outside any branch: every lane of the subgroup takes part.
        let total = subgroupAdd(acc);
        if (row_ok && lane == 0u) {
            y[params.y_offset + row] = total;
        }
    }
}
