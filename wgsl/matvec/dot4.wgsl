// Matvec driver, subgroup-cooperative family, integer variant: y[row] = dot(W[row, :], x).
//
// x is quantized once per workgroup to int8 in groups of 32 (scale amax / 127, as
// llama.cpp's q8_1 activations), staged in workgroup memory with each group's scale and
// sum, and multiplied with the weights' integer quants by dot4I8Packed: one
// instruction for four products, where the float path spends about four per weight
// (unpack, convert, FMA) and ran out of issue slots before memory did.
//
// Weights are read in "slices": a slice is the part of a block one lane decodes, sized
// by the per-type file so that the lanes of a subgroup read consecutive 16-byte pieces
// of the row (full cache lines per load instruction rather than words scattered over
// several blocks). One subgroup per row, lanes striding over the row's slices; rows are
// handed out from `num_subgroups` with a grid-stride loop over row batches, so any
// subgroup size and any number of workgroups is correct.
//
// The host prepends WG (invocations), TILE (x elements per tile, a multiple of 256) and
// X_GLU (whether x is the SwiGLU of two halves of its binding; see `x_at`).
// The per-type file appended after this one defines
//   alias W                   the weight binding's element (u32 or vec4<u32>)
//   const BLOCK: u32          weights per block
//   const SLICES: u32         slices per block
//   fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32
// the dot product of slice j of block blk of the row starting at byte row_byte, where
// the block's first weight is x group g of the staged tile.

struct Params {
    m: u32,          // rows in this dispatch
    k: u32,          // columns
    row_bytes: u32,  // bytes per weight row
    y_offset: u32,   // first output element written by this dispatch
    x_up: u32,       // with X_GLU: where the second operand starts in x, in elements
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<W>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// Group g of the tile: its 32 int8 values as two halves of 16 (4 per word, see
// `xq16`), its scale and the sum of its quantized values times the scale (for the
// blocks' minimums and offsets).
const GROUPS: u32 = TILE / 32u;
var<workgroup> xq: array<vec4<u32>, 2u * GROUPS + 1u>;
var<workgroup> xd: array<f32, GROUPS>;
var<workgroup> xsum: array<f32, GROUPS>;

// Half h (0 or 1) of group g. The halves are stored apart, the second set one slot
// further on: lanes reading consecutive groups, or the same half of every other group
// next to the other half of its neighbour, then fall on different workgroup-memory
// banks.
fn xq16(g: u32, h: u32) -> vec4<u32> {
    return xq[h * (GROUPS + 1u) + g];
}

// sum(q * xq) over 16 weights: four words of int8 quants against half a group of x.
fn dot16(q: vec4<u32>, xv: vec4<u32>) -> i32 {
    return dot4I8Packed(q.x, xv.x) + dot4I8Packed(q.y, xv.y)
         + dot4I8Packed(q.z, xv.z) + dot4I8Packed(q.w, xv.w);
}

// Four elements of the matvec's input starting at element 4i: x itself, or with X_GLU
// the SwiGLU of its two halves, silu(x[4i..]) * x[x_up + 4i..], so the FFN's down
// projection needs no separate SiLU-mul dispatch.
fn x_at(i: u32) -> vec4<f32> {
    let a = x[i];
    if (X_GLU) {
        return a / (1.0 + exp(-a)) * x[params.x_up / 4u + i];
    }
    return a;
}

// Quantizes x[t0 .. t0 + TILE] (zero past K), one group per invocation. K is a multiple
// of 32 for every type of this driver, so a group is either wholly inside x or past it.
fn stage_x(t0: u32, lid: u32) {
    for (var g = lid; g < GROUPS; g += WG) {
        let e = t0 + 32u * g;
        if (e >= params.k) {
            xq[g] = vec4<u32>(0u);
            xq[GROUPS + 1u + g] = vec4<u32>(0u);
            xd[g] = 0.0;
            xsum[g] = 0.0;
            continue;
        }
        let i = e / 4u;
        let v0 = x_at(i);
        let v1 = x_at(i + 1u);
        let v2 = x_at(i + 2u);
        let v3 = x_at(i + 3u);
        let v4 = x_at(i + 4u);
        let v5 = x_at(i + 5u);
        let v6 = x_at(i + 6u);
        let v7 = x_at(i + 7u);
        let a = max(max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3))),
                    max(max(abs(v4), abs(v5)), max(abs(v6), abs(v7))));
        let amax = max(max(a.x, a.y), max(a.z, a.w));
        let inv = select(0.0, 1.0 / amax, amax > 0.0);
        // pack4x8snorm rounds clamp(v, -1, 1) * 127 to the nearest integer.
        let lo = vec4<u32>(pack4x8snorm(v0 * inv), pack4x8snorm(v1 * inv),
                           pack4x8snorm(v2 * inv), pack4x8snorm(v3 * inv));
        let hi = vec4<u32>(pack4x8snorm(v4 * inv), pack4x8snorm(v5 * inv),
                           pack4x8snorm(v6 * inv), pack4x8snorm(v7 * inv));
        xq[g] = lo;
        xq[GROUPS + 1u + g] = hi;
        let d = amax / 127.0;
        xd[g] = d;
        // The sum of the quantized values, not of x: an offset or minimum term then
        // carries the same rounding as the quants' term (sum(w * xq) exactly), where the
        // exact sum would leave their errors uncancelled.
        let ones = vec4<u32>(0x01010101u);
        xsum[g] = d * f32(dot16(lo, ones) + dot16(hi, ones));
    }
}

// Slices [s0, s_end) of the row, over the subgroup's lanes, two per lane per iteration
// so their weight loads overlap. Slice s of the tile is slice s % SLICES of tile block
// s / SLICES; `blk0` is the row's block at the tile's start.
fn row_partial(row_byte: u32, blk0: u32, n_slices: u32, lane: u32, sg_size: u32) -> f32 {
    var acc = 0.0;
    var s = lane;
    loop {
        if (s + sg_size >= n_slices) { break; }
        let s1 = s + sg_size;
        let b = s / SLICES;
        let b1 = s1 / SLICES;
        acc += slice_dot(row_byte, blk0 + b, s % SLICES, b * (BLOCK / 32u))
             + slice_dot(row_byte, blk0 + b1, s1 % SLICES, b1 * (BLOCK / 32u));
        s += 2u * sg_size;
    }
    if (s < n_slices) {
        let b = s / SLICES;
        acc += slice_dot(row_byte, blk0 + b, s % SLICES, b * (BLOCK / 32u));
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
    let one_tile = params.k <= TILE;
    if (one_tile) {
        // x fits: quantize it once and keep it for every row batch this workgroup takes.
        stage_x(0u, lid);
        workgroupBarrier();
    }
    for (var base = wid.x * n_sg; base < params.m; base += groups.x * n_sg) {
        let row = base + sg_id;
        let ok = row < params.m;
        let rb = row * params.row_bytes;
        var acc = 0.0;
        if (one_tile) {
            if (ok) {
                acc = row_partial(rb, 0u, (params.k / BLOCK) * SLICES, lane, sg_size);
            }
        } else {
            for (var t0 = 0u; t0 < params.k; t0 += TILE) {
                workgroupBarrier();
                stage_x(t0, lid);
                workgroupBarrier();
                if (ok) {
                    let blocks = min(TILE, params.k - t0) / BLOCK;
                    acc += row_partial(rb, t0 / BLOCK, blocks * SLICES, lane, sg_size);
                }
            }
        }
        // Outside any branch: every lane of the subgroup takes part.
        let total = subgroupAdd(acc);
        if (lane == 0u && ok) {
            y[params.y_offset + row] = total;
        }
    }
}
