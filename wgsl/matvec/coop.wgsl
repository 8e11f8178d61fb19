// Matvec driver, subgroup-cooperative family: y[row] = dot(W[row, :], x).
//
// One subgroup per row. The workgroup stages a K-tile of x in workgroup memory (as XS,
// f16 where the device has it) and every subgroup reuses it for its row; the lanes of
// a subgroup split the row into 32-element units and meet in subgroupAdd. When all of
// x fits in one tile it is staged once per workgroup, however many row batches the
// workgroup then takes. Tiles are sized by the host from the device's
// workgroup-storage limit (padding included), so any K works. The subgroup size is only known here at run time (wgpu cannot force it), so
// rows are assigned from `num_subgroups` with a grid-stride loop over row batches:
// correct for any subgroup size and any number of workgroups.
//
// The host prepends the constants WG (invocations), TILE (x elements per tile, a
// multiple of the block size), XS_BYTES and the alias XS; the per-type file, which includes this one, defines
//   fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32
// the dot product of 32 consecutive weights (unit `unit` of the row) with
// xs[xs_base .. xs_base + 32].

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

// Each 32-element unit of x occupies UNIT_STRIDE slots: an odd number of 32-bit words
// (17 for f16, 33 for f32). Lanes of a subgroup read consecutive units at the same
// offset, so without the padding they would all hit one or two of the 32 banks.
const UNIT_STRIDE: u32 = 32u + 4u / XS_BYTES;
var<workgroup> xs: array<XS, (TILE / 32u) * UNIT_STRIDE>;

// A 32-bit load at any 2-byte-aligned byte offset (quant blocks of 18, 22, 34 and 210
// bytes leave rows and fields only 2-byte aligned). Both words are read so the
// subgroup does not diverge on alignment; the second is clamped into the binding.
fn load_u32(byte: u32) -> u32 {
    let i = byte >> 2u;
    let shift = (byte & 3u) * 8u;
    let lo = w[i];
    let hi = w[min(i + 1u, arrayLength(&w) - 1u)];
    return select((lo >> shift) | (hi << (32u - shift)), lo, shift == 0u);
}

fn load_f16(byte: u32) -> f32 {
    return unpack2x16float(load_u32(byte)).x;
}

// Columns: y_c = W x_c for c < params.cols, one after another inside each row batch,
// for the reasons dot4.wgsl's `batch_rows` gives. The element of x where the current
// column starts.
var<private> x_col: u32;

fn xv(i: u32) -> f32 {
    return f32(xs[i]);
}

fn x_at(gi: u32) -> f32 {
    if (gi < params.k) {
        return x[x_col + gi];
    }
    return 0.0;
}

// Stages x[t0 .. t0 + TILE] (zero past K) into the padded layout; four independent
// loads per iteration keep enough of them in flight to hide the L2 latency.
fn stage_x(t0: u32, lid: u32) {
    for (var i = lid; i < TILE; i += 4u * WG) {
        let v0 = x_at(t0 + i);
        let v1 = x_at(t0 + i + WG);
        let v2 = x_at(t0 + i + 2u * WG);
        let v3 = x_at(t0 + i + 3u * WG);
        xs[(i / 32u) * UNIT_STRIDE + i % 32u] = XS(v0);
        let i1 = i + WG;
        if (i1 < TILE) { xs[(i1 / 32u) * UNIT_STRIDE + i1 % 32u] = XS(v1); }
        let i2 = i + 2u * WG;
        if (i2 < TILE) { xs[(i2 / 32u) * UNIT_STRIDE + i2 % 32u] = XS(v2); }
        let i3 = i + 3u * WG;
        if (i3 < TILE) { xs[(i3 / 32u) * UNIT_STRIDE + i3 % 32u] = XS(v3); }
    }
}

// Units [u0, u_end) of the staged tile for the row at byte `rb`, split over the
// subgroup's lanes; each lane takes two units per iteration so their weight loads
// overlap.
fn row_partial(rb: u32, u0: u32, u_end: u32, lane: u32, sg_size: u32) -> f32 {
    var acc = 0.0;
    var u = u0 + lane;
    loop {
        if (u + sg_size >= u_end) { break; }
        let u1 = u + sg_size;
        acc += unit_dot(rb, u, (u - u0) * UNIT_STRIDE) + unit_dot(rb, u1, (u1 - u0) * UNIT_STRIDE);
        u += 2u * sg_size;
    }
    if (u < u_end) {
        acc += unit_dot(rb, u, (u - u0) * UNIT_STRIDE);
    }
    return acc;
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
    let one_tile = params.k <= TILE;
    // Each subgroup takes one row of a batch, for every column. x in one tile and one
    // column is staged once, by the workgroup's first batch; otherwise per column and
    // tile: by one call of stage_x either way, so a column's staged x is the same code
    // whatever params.cols.
    for (var base = wid.x * n_sg; base < params.m; base += groups.x * n_sg) {
        let row = base + sg_id;
        let ok = row < params.m;
        let rb = row * params.row_bytes;
        let restage = base == wid.x * n_sg || !one_tile || params.cols > 1u;
        for (var c = 0u; c < params.cols; c++) {
            x_col = c * params.x_stride;
            var acc = 0.0;
            for (var t0 = 0u; t0 < params.k; t0 += TILE) {
                if (restage) {
                    workgroupBarrier();
                    stage_x(t0, lid);
                    workgroupBarrier();
                }
                if (ok) {
                    let u0 = t0 / 32u;
                    acc += row_partial(rb, u0, min(u0 + TILE / 32u, n_units), lane, sg_size);
                }
            }
            // Outside any branch: every lane of the subgroup takes part.
            let total = subgroupAdd(acc);
            if (lane == 0u && ok) {
                y[params.y_offset + c * params.y_stride + row] = total;
            }
        }
    }
}
