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

// Q5_1: 32 weights per 24-byte block {d: f16, m: f16, qh: [u8; 4], qs: [u8; 16]}. qh is
// a little-endian u32 of fifth bits: weight j < 16 is the low nibble of qs[j] with bit j
// of qh on top, weight j + 16 the high nibble with bit j + 16; value = d * q + m, so
// dot = d * sum(q * x) + m * sum(x): the offset costs one multiply per block.
//
// Loads: blocks are 24 bytes and rows whole blocks, so every field is 4-byte aligned and
// is read straight from `w`: one word each for {d, m} and qh, and four for qs. The code
// is straight-line: naga puts a guard counter on every loop, which can keep the driver
// from unrolling it and issuing all the loads before the first use.
//
// Conversion: four 5-bit values are assembled in the four bytes of a word, the nibbles by
// a mask and the four matching qh bits spread to bit 4 of each byte by one multiply (see
// `fifth_bits` in q5_bits.wgsl). A byte OR'd into the mantissa of 2^23 is exactly 2^23 + q, and one
// subtraction of 2^23 yields q. This stays on the FP32 pipe; int-to-float conversion
// runs at a fraction of its rate on NVIDIA.
//
// Order of the x reads: the lanes of a subgroup run consecutive units 32 elements apart,
// so walking each unit front to back puts every lane on the same one or two
// workgroup-memory banks (16-way conflicts with f16 x). Each lane walks its unit's eight
// 4-element chunks starting at chunk r = (unit / 2) % 8, which spreads the lanes over all
// banks. Chunk c is the low (c < 4) or high nibbles of qs word c % 4, with its fifth bits
// at bits 4c.. of qh in both cases, so chunks c and c ^ 4 share a word, loaded by its
// index.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// Chunk c's four 5-bit values (nibbles at bit n of each byte of `q`) as floats.
fn quints(q: u32, n: u32, qh: u32, c: u32) -> vec4<f32> {
    let v = q5_word(q, n, qh, 4u * c);
    let b = (vec4<u32>(v) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0);
}

// Chunks c and c ^ 4, both held in qs word `qs + c % 4`: sum(q * x) into acc and
// sum(x) into sx.
fn chunk_pair(acc: ptr<function, vec4<f32>>, sx: ptr<function, vec4<f32>>, qs: u32, qh: u32,
              xs_base: u32, c: u32) {
    let q = w[qs + (c & 3u)];
    let n = c & 4u;
    let xa = x4(xs_base + 4u * c);
    let xb = x4(xs_base + 4u * (c ^ 4u));
    *acc += quints(q, n, qh, c) * xa + quints(q, n ^ 4u, qh, c ^ 4u) * xb;
    *sx += xa + xb;
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let i0 = (row_byte + unit * 24u) >> 2u;
    let dm = unpack2x16float(w[i0]);
    let qh = w[i0 + 1u];
    let r = (unit >> 1u) & 7u;
    var acc = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    chunk_pair(&acc, &sx, i0 + 2u, qh, xs_base, r);
    chunk_pair(&acc, &sx, i0 + 2u, qh, xs_base, (r + 1u) & 7u);
    chunk_pair(&acc, &sx, i0 + 2u, qh, xs_base, (r + 2u) & 7u);
    chunk_pair(&acc, &sx, i0 + 2u, qh, xs_base, (r + 3u) & 7u);
    let one = vec4<f32>(1.0);
    return dm.x * dot(acc, one) + dm.y * dot(sx, one);
}
