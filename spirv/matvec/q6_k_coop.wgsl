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

// Q6_K: 256 weights per 210-byte super-block
//   {ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16}
// A unit is run r = s % 4 of half h = s / 4 of the super-block, s = unit % 8: weight l
// (0..32) takes its low 4 bits from nibble r / 2 of ql[64 * h + 32 * (r % 2) + l] and its
// top 2 bits from bits 2r..2r+2 of qh[32 * h + l]; value = d * sc * (q - 32) with
// sc = scales[8 * h + 2 * r + l / 16], so a unit has two scales, one per 16 weights.
//
// Algebra: sum(w * x) = d * sum over the unit's 4-element chunks of sc * sum((q - 32) * x),
// with the chunk's scale applied to its two partial sums. The quants are assembled two at
// a time in the mantissas of a pair of f16 1024.0 (0x6400) and widened with
// unpack2x16float, which gives 1024 + q exactly without int-to-float conversions (a
// fraction of the FMA rate on NVIDIA), so q - 32 = (1024 + q) - 1056 and
// sum((q - 32) * x) = sum((1024 + q) * x) - 1056 * sum(x).
//
// 210-byte blocks leave odd super-blocks (and rows) only 2-byte aligned; the alignment is
// the same for every field of a unit, so `word2` funnels two aligned words by a shift
// chosen once per unit instead of load_u32's branch, which would diverge between the
// lanes of even and odd super-blocks.
//
// Order of the x reads: as in q4_k_coop.wgsl, each lane starts at chunk (unit / 2) % 8 of
// its eight 4-element chunks so the lanes of a subgroup do not all hit the same
// workgroup-memory banks; the chunk's scale is picked by its index.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// The 4 bytes at 2-aligned byte offset `byte`; `odd` says whether it is 2 mod 4.
fn word2(byte: u32, odd: bool) -> u32 {
    let i = byte >> 2u;
    let lo = w[i];
    return select(lo, (lo >> 16u) | (w[i + 1u] << 16u), odd);
}

// 1024 + the four 6-bit quants of a chunk: nibbles at bits n + 8k of `ql`, top bits at
// bits hs + 8k of `qh` (k = 0..4).
fn quants(ql: u32, qh: u32, n: u32, hs: u32) -> vec4<f32> {
    let t = qh >> hs;
    let even = unpack2x16float(((ql >> n) & 0x000f000fu) | ((t << 4u) & 0x00300030u) | 0x64006400u);
    let odd = unpack2x16float(((ql >> (n + 8u)) & 0x000f000fu) | ((t >> 4u) & 0x00300030u) | 0x64006400u);
    return vec4<f32>(even.x, odd.x, even.y, odd.y);
}

struct Unit {
    ql: u32,        // byte offset of the unit's 32 ql bytes
    qh: u32,        // byte offset of its 32 qh bytes
    odd: bool,      // both offsets are 2 mod 4
    n: u32,         // nibble shift in ql
    hs: u32,        // bit shift in qh
    scales: vec2<f32>,
    xs_base: u32,
}

// sc * sum((1024 + q) * x) and sc * sum(x) of chunk c.
fn chunk(u: Unit, c: u32) -> vec2<f32> {
    let xc = x4(u.xs_base + 4u * c);
    let q = quants(word2(u.ql + 4u * c, u.odd), word2(u.qh + 4u * c, u.odd), u.n, u.hs);
    let sc = select(u.scales.y, u.scales.x, c < 4u);
    return sc * vec2<f32>(dot(q, xc), dot(xc, vec4<f32>(1.0)));
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let o = row_byte + (unit >> 3u) * 210u;
    let s = unit & 7u;
    let h = s >> 2u;
    let r = s & 3u;
    // The unit's two i8 scales are adjacent, at a 2-aligned offset.
    let sb = o + 192u + 8u * h + 2u * r;
    let scales = bitcast<i32>(w[sb >> 2u] >> (8u * (sb & 2u)));
    let db = o + 208u;
    let d = unpack2x16float(w[db >> 2u] >> (8u * (db & 2u))).x;
    let u = Unit(
        o + 64u * h + 32u * (r & 1u),
        o + 128u + 32u * h,
        (o & 2u) != 0u,
        4u * (r >> 1u),
        2u * r,
        vec2<f32>(f32(extractBits(scales, 0u, 8u)), f32(extractBits(scales, 8u, 8u))),
        xs_base,
    );
    let rot = unit >> 1u;
    // Eight chunks in a row rather than a loop (naga guards every loop with a counter,
    // which can keep the driver from unrolling it).
    let acc = chunk(u, rot & 7u) + chunk(u, (rot + 1u) & 7u) + chunk(u, (rot + 2u) & 7u)
        + chunk(u, (rot + 3u) & 7u) + chunk(u, (rot + 4u) & 7u) + chunk(u, (rot + 5u) & 7u)
        + chunk(u, (rot + 6u) & 7u) + chunk(u, (rot + 7u) & 7u);
    return d * (acc.x - 1056.0 * acc.y);
}
