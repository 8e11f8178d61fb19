enable f16;
const WG: u32 = 256u;
const TILE: u32 = 4096u;
const XS_BYTES: u32 = 2u;
alias XS = f16;

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

// Q8_0: 32 weights per 34-byte block {d: f16, qs: [i8; 32]}; value = d * qs[j], so
// dot = d * sum(qs[j] * x[j]) with one multiply by d per block.
//
// Loads: blocks are only 2-byte aligned and alternate between offsets 0 and 2 mod 4 from
// lane to lane, so load_u32's alignment branch would diverge on every load. Each lane
// instead reads the 9 aligned words that hold its block (never a word outside it) and
// picks, with a select, either whole words (block at 2 mod 4: qs starts word-aligned) or
// the halves straddling two words (block at 0 mod 4). The code is straight-line: naga
// puts a guard counter on every loop, which can keep the driver from unrolling it and
// issuing all the loads before the first use.
//
// Conversion: flipping the sign bit maps i8 q to the byte q + 128, and a byte OR'd into
// the mantissa of 2^23 is exactly 2^23 + byte, so one subtraction of 2^23 + 128 yields q.
// This stays on the FP32 pipe; int-to-float conversion runs at a fraction of its rate on
// NVIDIA.
//
// Order of the x reads: the lanes of a subgroup run consecutive units 32 elements apart,
// so walking each unit front to back puts every lane on the same one or two
// workgroup-memory banks (16-way conflicts with f16 x). Each lane walks its unit's eight
// 4-element chunks starting at chunk r = (unit / 2) % 8, which spreads the lanes over all
// banks. The qs words follow: a three-stage rotation by selects moves word (r + s) % 8
// into slot s, so no register array is indexed at run time.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// One chunk: the 4 weights of qs word `q` times x chunk `c`.
fn chunk(acc: ptr<function, vec4<f32>>, q: u32, xs_base: u32, c: u32) {
    let b = (vec4<u32>(q ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    let v = bitcast<vec4<f32>>(b | vec4<u32>(0x4b000000u)) - vec4<f32>(8388736.0);
    *acc += v * x4(xs_base + 4u * c);
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let b = row_byte + unit * 34u;
    let i0 = b >> 2u;
    let odd = (b & 2u) != 0u;
    let w0 = w[i0];
    let lo_a = vec4<u32>(w0, w[i0 + 1u], w[i0 + 2u], w[i0 + 3u]);
    let lo_b = vec4<u32>(w[i0 + 4u], w[i0 + 5u], w[i0 + 6u], w[i0 + 7u]);
    let hi_a = vec4<u32>(lo_a.yzw, lo_b.x);
    let hi_b = vec4<u32>(lo_b.yzw, w[i0 + 8u]);
    let s16 = vec4<u32>(16u);
    // qs words 0..3 and 4..7.
    let qa = select((lo_a >> s16) | (hi_a << s16), hi_a, odd);
    let qb = select((lo_b >> s16) | (hi_b << s16), hi_b, odd);

    let r = (unit >> 1u) & 7u;
    let r1 = (r & 1u) != 0u;
    let a1 = select(qa, vec4<u32>(qa.yzw, qb.x), r1);
    let b1 = select(qb, vec4<u32>(qb.yzw, qa.x), r1);
    let r2 = (r & 2u) != 0u;
    let a2 = select(a1, vec4<u32>(a1.zw, b1.xy), r2);
    let b2 = select(b1, vec4<u32>(b1.zw, a1.xy), r2);
    let r4 = (r & 4u) != 0u;
    let a3 = select(a2, b2, r4);
    let b3 = select(b2, a2, r4);

    var acc = vec4<f32>(0.0);
    chunk(&acc, a3.x, xs_base, r);
    chunk(&acc, a3.y, xs_base, (r + 1u) & 7u);
    chunk(&acc, a3.z, xs_base, (r + 2u) & 7u);
    chunk(&acc, a3.w, xs_base, (r + 3u) & 7u);
    chunk(&acc, b3.x, xs_base, (r + 4u) & 7u);
    chunk(&acc, b3.y, xs_base, (r + 5u) & 7u);
    chunk(&acc, b3.z, xs_base, (r + 6u) & 7u);
    chunk(&acc, b3.w, xs_base, (r + 7u) & 7u);
    let dd = unpack2x16float(w0);
    return select(dd.x, dd.y, odd) * dot(acc, vec4<f32>(1.0));
}
