const WG: u32 = 256u;
const TILE: u32 = 4096u;
const LANES: u32 = 0u;
const X_PLANES: u32 = 1u;
const X_GLU: bool = false;
const X_Q8: bool = false;
const X_DIRECT: bool = false;
const QUEUE: bool = false;
const PREFETCH: bool = false;
const COLUMNS_AT_ONCE: u32 = 1u;
const X_COLS: u32 = 1u;

// Matvec driver, subgroup-cooperative family, integer variant: y[row] = dot(W[row, :], x).
//
// x is quantized to int8 in groups of 32 on one or two planes (X_PLANES; the first with
// scale amax / 127, as llama.cpp's q8_1 activations, the second its residual 256 times
// finer; q8_x.wgsl), once per workgroup or once for all by the op that produced it,
// staged in workgroup memory with each group's scale and sums, and multiplied with the
// weights' integer quants by dot4I8Packed: one instruction for four products, where the
// float path spends about four per weight (unpack, convert, FMA) and ran out of issue
// slots before memory did. With two planes a group's integer dot product is 256 times
// the first plane's plus the second's, and its scale amax / (127 * 256).
//
// Weights are read in "slices": a slice is the part of a block one lane decodes, sized
// by the per-type file so that the lanes of a row read consecutive 16-byte pieces of it
// (full cache lines per load instruction rather than words scattered over several
// blocks). LANES lanes per row, striding over its slices; a wider subgroup takes several
// rows. A workgroup takes a batch of rows (one per subgroup or team) at a time, in a
// grid-stride loop or, with QUEUE, its first by its index and the rest from a queue
// (`take_batch`); either way any subgroup size and any number of workgroups is correct.
//
// The host prepends WG (invocations), TILE (x elements per tile, a multiple of 256),
// LANES (lanes per row: 0 for a whole subgroup, or a power of two), X_PLANES (1 or 2),
// X_GLU (whether x is
// the SwiGLU of two halves of its binding; see `x_at`), X_Q8 (whether x arrives
// already quantized; see `stage_x`), X_DIRECT (with X_Q8: whether x is read in place
// rather than staged; see `xq16`), QUEUE (whether workgroups take row batches from a
// queue; see `take_batch`), PREFETCH (whether lanes load a slice ahead: the per-type
// files that can include dot4_prefetch.wgsl, the others dot4_no_prefetch.wgsl) and
// COLUMNS_AT_ONCE (1, or with a per-type file that splits its slices up to 8: columns
// each loaded slice is dotted with; see `batch_rows` and `staged_columns`) and X_COLS
// (the columns staged at once: COLUMNS_AT_ONCE where x is staged, else 1).
// The per-type file, which includes this one, q8_x.wgsl and one of those two, defines
//   alias W                   the weight binding's element (u32 or vec4<u32>)
//   const BLOCK: u32          weights per block
//   const SLICES: u32         slices per block
//   const HALF_SKEW: u32      0..8, where second halves of x groups start (see `xq`)
//   const STEP: u32           slices per lane per iteration, 1 or 2 (see `row_partial`)
//   fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32
// the dot product of slice j of block blk of the row starting at byte row_byte, where
// the block's first weight is x group g of the staged tile; and, to be prefetched or
// dotted with several columns (`MatvecKernel::splits_slices`), the same in parts:
//   struct Raw                fn slice_load(row_byte: u32, blk: u32, j: u32) -> Raw
//   struct Prep               fn slice_prep(r: Raw, j: u32) -> Prep
//   fn prep_math(p: Prep, g: u32) -> f32
//   fn slice_math(r: Raw, j: u32, g: u32) -> f32   (prep_math of slice_prep)
// where Prep is what the slice's dot product needs of its weights, whatever x.

struct Params {
    m: u32,          // rows in this dispatch
    k: u32,          // columns
    row_bytes: u32,  // bytes per weight row
    y_offset: u32,   // first output element written by this dispatch
    x_up: u32,       // with X_GLU: where the second operand starts in x, in elements
    cols: u32,       // columns of x (and of y) this dispatch multiplies
    x_stride: u32,   // from one x column to the next, in vec4s of the binding
    y_stride: u32,   // from one y column to the next, in elements
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<W>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
// With QUEUE, the batch queue (`take_batch`): batches handed out past each workgroup's
// first; zero between dispatches. Bound, unused, without.
@group(0) @binding(4) var<storage, read_write> queue: atomic<u32>;

// Group g of the tile: its 32 int8 values as two halves of 16 (4 per word, see
// `xq16`), its scale, and the sum of its quantized values times the scale (for the
// blocks' minimums). With X_COLS > 1, column c's tile follows column c - 1's, laid out
// alike (see `xs_col`).
//
// Laid out so that a subgroup's reads of them hit distinct workgroup-memory banks (32
// banks of 4 bytes, so a 16-byte half takes 4 and eight of them cover all): group g sits
// at slot g + g / 8, one slot of padding per 256-weight block, because the lanes of
// neighbouring blocks read groups 8 apart, which would otherwise share banks; and the
// second halves start at HALF, HALF_SKEW slots past a multiple of 8, where the per-type
// file's own lane pattern (which halves its lanes read together) wants them.
const GROUPS: u32 = TILE / 32u;
const SLOTS: u32 = GROUPS + GROUPS / 8u;
const HALF: u32 = (SLOTS + 7u) / 8u * 8u + HALF_SKEW;
// One column's int8 halves.
const XQ_COLUMN: u32 = HALF + SLOTS;
var<workgroup> xq: array<vec4<u32>, X_COLS * XQ_COLUMN>;
// The second plane, laid out as the first (one slot where X_PLANES is 1).
const R_LEN: u32 = select(1u, X_COLS * XQ_COLUMN, X_PLANES == 2u);
var<workgroup> xr: array<vec4<u32>, R_LEN>;
var<workgroup> xds: array<vec2<f32>, X_COLS * SLOTS>;

// Columns: y_c = W x_c for c < params.cols, one after another inside each row batch (see
// `batch_rows`). The vec4 of the x binding where the current column starts: every read
// of x adds it, so one column's arithmetic is the same code whichever column it is.
var<private> x_col: u32;
// The staged column the reads of staged x take (below X_COLS), as x_col does in place.
var<private> xs_col: u32;

// Every workgroup index goes through slot(g) of a group g below GROUPS, and the
// staged column xs_col below X_COLS, which keeps it in range without wgpu's clamps (the
// launch's IndexChecks::Kernel): keep it so.
fn slot(g: u32) -> u32 {
    return g + g / 8u;
}

// Half h of group g of the staged column, in xq or xr.
fn half_slot(g: u32, h: u32) -> u32 {
    return xs_col * XQ_COLUMN + h * HALF + slot(g);
}

// Group g's scale and sum in xds.
fn tail_slot(g: u32) -> u32 {
    return xs_col * SLOTS + slot(g);
}

// With X_DIRECT, x (already quantized, with its tails) is read where the staged copy
// would be, group g of the tile being group g of x (the route makes all of K one tile):
// no workgroup copies it and none waits at a barrier for it before its first weight
// load. Every workgroup's lanes read the same few KB, which stay in the compute unit's
// cache.

// With X_Q8, vec4 j of group g of x (q8_x.wgsl's layout): 0 and 1 the first plane's
// halves, 2 its tail, 3 and 4 the second plane's halves, 5 the two planes' tail (d,
// d * sum, and the sums of the halves, bitcast).
fn x_q8(g: u32, j: u32) -> vec4<f32> {
    return x[x_col + Q8_GROUP_VEC4S * g + j];
}

// Half h (0 or 1) of group g, first plane.
fn xq16(g: u32, h: u32) -> vec4<u32> {
    if (X_DIRECT) {
        return bitcast<vec4<u32>>(x_q8(g, h));
    }
    return xq[half_slot(g, h)];
}

// Half h of group g, second plane.
fn xr16(g: u32, h: u32) -> vec4<u32> {
    if (X_DIRECT) {
        return bitcast<vec4<u32>>(x_q8(g, 3u + h));
    }
    return xr[half_slot(g, h)];
}

// Group g's tail for X_PLANES planes, read in place.
fn xtail(g: u32) -> vec4<f32> {
    return x_q8(g, select(2u, 5u, X_PLANES == 2u));
}

// Group g's scale.
fn xd(g: u32) -> f32 {
    if (X_DIRECT) {
        return xtail(g).x;
    }
    return xds[tail_slot(g)].x;
}

// Group g's sum: d * sum(xq).
fn xsum(g: u32) -> f32 {
    if (X_DIRECT) {
        return xtail(g).y;
    }
    return xds[tail_slot(g)].y;
}

// sum(q * xq) over 16 weights: four words of int8 quants against half a group of x.
fn dot16(q: vec4<u32>, xv: vec4<u32>) -> i32 {
    return dot4I8Packed(q.x, xv.x) + dot4I8Packed(q.y, xv.y)
         + dot4I8Packed(q.z, xv.z) + dot4I8Packed(q.w, xv.w);
}

// sum(q * xq) over half h of x group g, on every plane (256 * the first's + the
// second's, which the scale xd(g) is made for).
fn xdot16(q: vec4<u32>, g: u32, h: u32) -> i32 {
    let first = dot16(q, xq16(g, h));
    if (X_PLANES == 2u) {
        return 256 * first + dot16(q, xr16(g, h));
    }
    return first;
}

// sum(q * xq) over all 32 weights of x group g: int8 quants `lo` against its first half,
// `hi` against its second.
fn group_dot(lo: vec4<u32>, hi: vec4<u32>, g: u32) -> i32 {
    return xdot16(lo, g, 0u) + xdot16(hi, g, 1u);
}

// Four elements of the matvec's input starting at element 4i: x itself, or with X_GLU
// the SwiGLU of its two halves, silu(x[4i..]) * x[x_up + 4i..], so the FFN's down
// projection needs no separate SiLU-mul dispatch.
fn x_at(i: u32) -> vec4<f32> {
    let a = x[x_col + i];
    if (X_GLU) {
        return silu_times(a, x[x_col + params.x_up / 4u + i]);
    }
    return a;
}

// Stages x[t0 .. t0 + TILE] of the column x_col (zero past K) as staged column xs_col,
// one group per invocation: quantizes it, or with X_Q8 copies it, already quantized. K
// is a multiple of 32 for every type of this driver, so a group is either wholly inside
// x or past it.
fn stage_x(t0: u32, lid: u32) {
    for (var g = lid; g < GROUPS; g += WG) {
        let e = t0 + 32u * g;
        var q: Q8Group;
        if (e >= params.k) {
            let z = vec4<u32>(0u);
            q = Q8Group(z, z, vec4<f32>(0.0), z, z, vec4<f32>(0.0));
        } else if (X_Q8) {
            let xg = e / 32u;
            q = Q8Group(bitcast<vec4<u32>>(x_q8(xg, 0u)), bitcast<vec4<u32>>(x_q8(xg, 1u)),
                        x_q8(xg, 2u), bitcast<vec4<u32>>(x_q8(xg, 3u)),
                        bitcast<vec4<u32>>(x_q8(xg, 4u)), x_q8(xg, 5u));
        } else {
            let i = e / 4u;
            q = q8_group(array<vec4<f32>, 8>(x_at(i), x_at(i + 1u), x_at(i + 2u), x_at(i + 3u),
                                             x_at(i + 4u), x_at(i + 5u), x_at(i + 6u), x_at(i + 7u)));
        }
        xq[half_slot(g, 0u)] = q.lo;
        xq[half_slot(g, 1u)] = q.hi;
        var tail = q.tail;
        if (X_PLANES == 2u) {
            xr[half_slot(g, 0u)] = q.lo2;
            xr[half_slot(g, 1u)] = q.hi2;
            tail = q.tail2;
        }
        xds[tail_slot(g)] = tail.xy;
    }
}

// The partial dot product of the row at byte `row_byte` over slices [0, n_slices) of
// the tile, for lane `tl` of the row's `lanes`: they stride over the slices. Slice s is
// slice s % SLICES of tile block s / SLICES; `blk0` is the row's block at the tile's
// start.
//
// With STEP = 2 a lane takes two slices per iteration, so that their weight loads
// overlap; with STEP = 1 (the per-type file's choice), or with teams of LANES lanes, one
// at a time, which keeps fewer registers live. On the H200 one at a time won where a
// slice holds five loads (the Q5_K head 74 -> 79 %, Q6_K FFN shapes 38 -> 40 %) and with
// teams (the 202,048 x 6,656 Q5_K head, 8 lanes per row: 78 -> 84 %), and lost 2-3 %
// for Q4_K's three loads. Q5_K's four (results/k_quant_layout/) split the FFN shapes:
// two at a time lost 2.5-9 points on 14,336 x 4,096 and won 1.5-2 on 4,096 x 14,336.
fn row_partial(row_byte: u32, blk0: u32, n_slices: u32, tl: u32, lanes: u32) -> f32 {
    var acc = 0.0;
    var s = tl;
    if (STEP == 2u && LANES == 0u) {
        loop {
            if (s + lanes >= n_slices) { break; }
            let s1 = s + lanes;
            let b = s / SLICES;
            let b1 = s1 / SLICES;
            acc += slice_dot(row_byte, blk0 + b, s % SLICES, b * (BLOCK / 32u))
                 + slice_dot(row_byte, blk0 + b1, s1 % SLICES, b1 * (BLOCK / 32u));
            s += 2u * lanes;
        }
    }
    loop {
        if (s >= n_slices) { break; }
        let b = s / SLICES;
        acc += slice_dot(row_byte, blk0 + b, s % SLICES, b * (BLOCK / 32u));
        s += lanes;
    }
    return acc;
}

// The next batch for this workgroup, one of `groups`, or one past the `n_batches` of
// the dispatch when none is left: handed out in order, as workgroups free, where the
// grid-stride loop fixes each workgroup's batches in advance. With few batches per
// workgroup that fixed share ends raggedly (the 202,048 x 6,656 head: 6.17 batches
// each on an H200, so 17 % of the workgroups run a seventh while the rest are done);
// the queue evens it out, at an atomic on one counter per batch (see the router).
//
// Every workgroup that had a batch takes until it is refused, so the counter's last
// ticket is n_batches - 1 however many workgroups there are: whoever draws it resets
// the counter for the next dispatch.
var<workgroup> next_batch: u32;
fn take_batch(lid: u32, groups: u32, n_batches: u32) -> u32 {
    if (lid == 0u) {
        let t = atomicAdd(&queue, 1u);
        if (t == n_batches - 1u) {
            atomicStore(&queue, 0u);
        }
        next_batch = groups + t;
    }
    return workgroupUniformLoad(&next_batch);
}

// The rows base .. base + a batch, one per subgroup or team, for every column: x in one
// tile or several.
//
// The columns loop around the batch's rows rather than inside a lane's slice loop: a
// lane's slices of one column are the same code, in the same order, whatever
// params.cols is (the driver cannot specialize a runtime bound), so a column's output
// is bit for bit a one-column dispatch's. Dotting each loaded slice with every column
// would need one accumulator per column, a runtime-indexed array that lives in memory
// rather than registers. Looping around the batch, the second and later columns find
// the batch's weights in L1 or L2 rather than DRAM, but every column still issues all
// of the weight loads and their arithmetic: on the H200 (Q4_K, 8B shapes, 2026-12-04)
// a column costs about what a one-column dispatch does, in place 1.0x, staged 0.4-0.6x
// at 8 columns (staging is redone per column and batch).
//
// With COLUMNS_AT_ONCE > 1 (x in place) the register form runs instead
// (`columns_at_once`, dot4_prefetch.wgsl): each slice loaded once and dotted with up to
// COLUMNS_AT_ONCE columns, one accumulator each. A column's sums are the same code in
// the same order whichever of the run it is and however many columns the dispatch has,
// so it is bit for bit this launch's one-column dispatch (not the COLUMNS_AT_ONCE = 1
// pipeline's: a model takes one or the other for every step). Measured on the H200
// (8B shapes, x in place, results/many_sequences/columns_at_once/): at 8 columns
// 0.87-1.23x (Q4_K 14,336 x 4,096: 108 µs against 114), at one column 0.70x (28.9
// against 20.3): each column still reads its x groups from memory for every slice, so
// the loads of x, not of the weights, bound it. Off unless asked. Each subgroup taking
// 2 or 4 weight rows at once, so that a lane's x served them all, was slower too on an
// H100 but for 2 rows on the largest Q4_K matrices (results/parallel/rows_at_once).
// Staged rather than in place, X_COLS columns at once (`staged_columns`, which main
// runs instead of this): at 8 columns on an H100 1.1-1.5x the loop below by kernel, and
// 8 sequences of the 8B shape 1.135x (results/parallel/staged_columns).
//
// Here staged x holds one column at a time. x in one tile and one column is staged once, by
// the workgroup's first batch (`first`); otherwise per column and tile. Either way by
// this one call of stage_x, so a column's int8 x is the same code whatever params.cols.
fn batch_rows(base: u32, first: bool, one_tile: bool, lid: u32, sg_id: u32, per_sg: u32,
              team: u32, tl: u32, lanes: u32) {
    let row = base + sg_id * per_sg + team;
    let ok = row < params.m;
    let rb = row * params.row_bytes;
    // In place, x is one tile of all of K.
    let span = select(TILE, params.k, X_DIRECT);
    let restage = !X_DIRECT && (first || !one_tile || params.cols > 1u);
    if (COLUMNS_AT_ONCE > 1u && X_DIRECT) {
        for (var c0 = 0u; c0 < params.cols; c0 += COLUMNS_AT_ONCE) {
            columns_at_once(rb, ok, c0, min(COLUMNS_AT_ONCE, params.cols - c0), row, tl, lanes);
        }
        return;
    }
    for (var c = 0u; c < params.cols; c++) {
        x_col = c * params.x_stride;
        var acc = 0.0;
        for (var t0 = 0u; t0 < params.k; t0 += span) {
            if (restage) {
                workgroupBarrier();
                stage_x(t0, lid);
                workgroupBarrier();
            }
            if (ok) {
                let blocks = min(span, params.k - t0) / BLOCK;
                acc += row_partial(rb, t0 / BLOCK, blocks * SLICES, tl, lanes);
            }
        }
        // Outside any branch: every lane of the subgroup takes part.
        let total = row_total(acc);
        if (tl == 0u && ok) {
            y[params.y_offset + c * params.y_stride + row] = total;
        }
    }
}

// The sum of a row's partial dot products over its lanes. Every lane of the subgroup
// must call it.
fn row_total(acc: f32) -> f32 {
    var total = acc;
    if (LANES == 0u) {
        total = subgroupAdd(acc);
    } else {
        for (var o = LANES / 2u; o > 0u; o /= 2u) {
            total += subgroupShuffleXor(total, o);
        }
    }
    return total;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg_id: u32,
        @builtin(num_subgroups) n_sg: u32,
        @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) sg_size: u32) {
    let one_tile = X_DIRECT || params.k <= TILE;
    // A whole subgroup per row (LANES = 0), or LANES lanes per row and sg_size / LANES
    // rows per subgroup (the router never picks LANES wider than the device's smallest
    // subgroup). With LANES = 0 these fold to constants and the row stays uniform across
    // the subgroup, which on the H200 is worth up to 23 %: its address arithmetic then
    // runs once per subgroup rather than on every lane.
    let lanes = select(max(LANES, 1u), sg_size, LANES == 0u);
    let per_sg = select(sg_size / max(LANES, 1u), 1u, LANES == 0u);
    let team = select(lane / max(LANES, 1u), 0u, LANES == 0u);
    let tl = select(lane % max(LANES, 1u), lane, LANES == 0u);
    let batch = n_sg * per_sg;
    if (COLUMNS_AT_ONCE > 1u && !X_DIRECT) {
        staged_columns(wid.x * batch, groups.x * batch, sg_id * per_sg + team, tl, lanes, lid);
        return;
    }
    if (PREFETCH && one_tile && !QUEUE) {
        rows_prefetched(wid.x * batch, groups.x * batch, sg_id * per_sg + team, tl, lanes, lid);
        return;
    }
    // Each batch takes every column, so the queue counts row batches as it did before
    // columns: its counter and reset are unchanged.
    if (QUEUE) {
        let n_batches = (params.m + batch - 1u) / batch;
        for (var b = wid.x; b < n_batches; b = take_batch(lid, groups.x, n_batches)) {
            batch_rows(b * batch, b == wid.x, one_tile, lid, sg_id, per_sg, team, tl, lanes);
        }
    } else {
        for (var base = wid.x * batch; base < params.m; base += groups.x * batch) {
            batch_rows(base, base == wid.x * batch, one_tile, lid, sg_id, per_sg, team, tl,
                       lanes);
        }
    }
}
// Loading a slice ahead, for a route with PREFETCH (router clause 6), and a loaded slice
// dotted with several columns (COLUMNS_AT_ONCE): included after dot4.wgsl by the
// per-type files that split a slice into `slice_load` (its loads, as a `Raw`) and
// `slice_math` (the rest), itself `slice_prep` (what of the weights any column needs)
// then `prep_math` (one column's part). Without either the driver never calls them.

// Slice s of `row` (nothing past the rows or the row's slices), x in one tile.
fn load_slice(row: u32, s: u32, n_slices: u32) -> Raw {
    var r: Raw;
    if (row < params.m && s < n_slices) {
        r = slice_load(row * params.row_bytes, s / SLICES, s % SLICES);
    }
    return r;
}

// x in one tile, no queue: a lane's slices of its rows, one batch after another, as one
// sequence, each slice's weights loaded before the previous slice's arithmetic, so
// that a lane has loads in flight while it computes, also across the end of a row.
// Every lane runs the same number of steps a row (some past the row's last slice), so
// the lanes of a subgroup reach each row's end together.
//
// Columns (see dot4.wgsl's `batch_rows`): the sequence runs each row once per column,
// its weights loaded again (from L1 or L2) for the next column; x is staged at the start
// of each column of each row, or with one column once, by the one call of stage_x.
fn rows_prefetched(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32, lid: u32) {
    let n_slices = (params.k / BLOCK) * SLICES;
    let steps = (n_slices + lanes - 1u) / lanes;
    var base = first;
    if (base >= params.m) {
        return;
    }
    var i = 0u;
    var s = tl;
    var c = 0u;
    var staged = false;
    var raw = load_slice(base + offset, s, n_slices);
    var acc = 0.0;
    loop {
        x_col = c * params.x_stride;
        // The first slice's loads are in flight while x is staged.
        if (!X_DIRECT && i == 0u && (!staged || params.cols > 1u)) {
            workgroupBarrier();
            stage_x(0u, lid);
            workgroupBarrier();
            staged = true;
        }
        let row = base + offset;
        let row_end = i + 1u == steps;
        let last_col = c + 1u == params.cols;
        let next_base = select(base, base + stride, row_end && last_col);
        let next_s = select(s + lanes, tl, row_end);
        let next = load_slice(next_base + offset, next_s, n_slices);
        if (row < params.m && s < n_slices) {
            let b = s / SLICES;
            acc += slice_math(raw, s % SLICES, b * (BLOCK / 32u));
        }
        if (row_end) {
            let total = row_total(acc);
            if (tl == 0u && row < params.m) {
                y[params.y_offset + c * params.y_stride + row] = total;
            }
            acc = 0.0;
            if (next_base >= params.m) {
                break;
            }
            c = select(c + 1u, 0u, last_col);
        }
        base = next_base;
        s = next_s;
        i = select(i + 1u, 0u, row_end);
        raw = next;
    }
}

// x in place or staged (column c0 + c as staged column c), `n` columns from c0 (1 to
// COLUMNS_AT_ONCE): each of the lane's slices of the row at byte `rb` loaded and
// prepared once (`slice_prep`) and dotted with every column, one accumulator each,
// then each column's row total written. A column's slices are summed in the order
// row_partial sums them with STEP = 1 whatever `n` is; every lane of the subgroup calls
// it (the totals are subgroup operations).
fn columns_at_once(rb: u32, ok: bool, c0: u32, n: u32, row: u32, tl: u32, lanes: u32) {
    columns_of_tile(rb, ok, c0, n, row, tl, lanes, 0u, (params.k / BLOCK) * SLICES, false);
}

// `columns_at_once` over the `n_slices` slices of one tile of x, the row's blocks from
// `blk0` on: with `after` (a tile past the first), each column's total is added to what
// y holds for the tiles before it, tile after tile in K's order, by the lane that
// wrote it.
fn columns_of_tile(rb: u32, ok: bool, c0: u32, n: u32, row: u32, tl: u32, lanes: u32,
                   blk0: u32, n_slices: u32, after: bool) {
    var sums: ColumnSums;
    for (var s = tl; ok && s < n_slices; s += lanes) {
        let b = s / SLICES;
        let prep = slice_prep(slice_load(rb, blk0 + b, s % SLICES), s % SLICES);
        dot_run(&sums, prep, b * (BLOCK / 32u), c0, n);
    }
    store_run(&sums, c0, n, row, tl, ok, after);
}

// One accumulator per column of a run.
alias ColumnSums = array<f32, COLUMNS_AT_ONCE>;

// A prepared slice whose first weight is x group g dotted with each of the run's `n`
// columns from c0 (staged column c, or in place), into its accumulator. A full run
// has no branch per column, which leaves the driver free to interleave the columns'
// loads and dot products: on an H100 at 8 columns 747.7 tok/s against 720.7 with one
// (results/parallel/staged_prefetch). A shorter run (sequences that left the step)
// branches per column rather than compute columns it does not have.
fn dot_run(sums: ptr<function, ColumnSums>, prep: Prep, g: u32, c0: u32, n: u32) {
    if (n == COLUMNS_AT_ONCE) {
        for (var c = 0u; c < COLUMNS_AT_ONCE; c++) {
            dot_column(sums, prep, g, c0, c);
        }
        return;
    }
    for (var c = 0u; c < COLUMNS_AT_ONCE; c++) {
        if (c < n) {
            dot_column(sums, prep, g, c0, c);
        }
    }
}

// Column c0 + c of a prepared slice (x group g on), into accumulator c.
fn dot_column(sums: ptr<function, ColumnSums>, prep: Prep, g: u32, c0: u32, c: u32) {
    x_col = (c0 + c) * params.x_stride;
    xs_col = select(c, 0u, X_DIRECT);
    (*sums)[c] += prep_math(prep, g);
}

// Each of the run's columns' row totals (subgroup sums: every lane of the subgroup
// calls it) written to y by lane 0 where the row is `ok`, or with `after` added to what
// y holds.
fn store_run(sums: ptr<function, ColumnSums>, c0: u32, n: u32, row: u32, tl: u32, ok: bool,
             after: bool) {
    for (var c = 0u; c < COLUMNS_AT_ONCE; c++) {
        let total = row_total((*sums)[c]);
        if (c < n && tl == 0u && ok) {
            let at = params.y_offset + (c0 + c) * params.y_stride + row;
            if (after) {
                y[at] += total;
            } else {
                y[at] = total;
            }
        }
    }
}

// The run of `n` columns from c0 staged as staged columns 0 .. n, the tile of x from
// t0, between barriers (the workgroup's previous reads of the stage come first).
fn stage_run(c0: u32, n: u32, t0: u32, lid: u32) {
    workgroupBarrier();
    for (var c = 0u; c < n; c++) {
        x_col = (c0 + c) * params.x_stride;
        xs_col = c;
        stage_x(t0, lid);
    }
    workgroupBarrier();
}

// x staged, COLUMNS_AT_ONCE > 1, no queue: the columns in runs of up to
// COLUMNS_AT_ONCE, each run's x staged once per workgroup and tile (X_COLS staged
// columns, by the one stage_x, so a column's int8 x is the same code whichever of the
// run it is), then every row of the workgroup's batches, each loaded slice dotted with
// every column of the run (`columns_of_tile`). Where the one-column route restages x
// per column and row batch, and reloads the weights per column, a step of up to
// COLUMNS_AT_ONCE rows reads each weight once and stages each x once per workgroup and
// tile. Past the first tile a row's totals are added to the earlier tiles' in y.
fn staged_columns(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32, lid: u32) {
    if (PREFETCH) {
        staged_columns_prefetched(first, stride, offset, tl, lanes, lid);
        return;
    }
    for (var c0 = 0u; c0 < params.cols; c0 += COLUMNS_AT_ONCE) {
        let n = min(COLUMNS_AT_ONCE, params.cols - c0);
        for (var t0 = 0u; t0 < params.k; t0 += TILE) {
            stage_run(c0, n, t0, lid);
            let n_slices = min(TILE, params.k - t0) / BLOCK * SLICES;
            for (var base = first; base < params.m; base += stride) {
                let row = base + offset;
                columns_of_tile(row * params.row_bytes, row < params.m, c0, n, row, tl, lanes,
                                t0 / BLOCK, n_slices, t0 != 0u);
            }
        }
    }
}

// `staged_columns` with PREFETCH (x in one tile): as `rows_prefetched` does for one
// column, a lane's slices of its rows run as one sequence, each slice's weights loaded
// before the previous slice's arithmetic (also across a row's end), and a run's first
// slice loaded before its x is staged, so that a lane has loads in flight while it
// computes. A row's slices are those `columns_at_once` takes, in its order, each column
// summed from zero, so a column's total is the same code whichever of the run it is and
// however many columns the dispatch has. Every lane runs the same number of steps a row
// (some past the row's last slice), so the lanes of a subgroup reach each row's end,
// where the totals are subgroup operations, together.
fn staged_columns_prefetched(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32,
                             lid: u32) {
    let n_slices = (params.k / BLOCK) * SLICES;
    let steps = (n_slices + lanes - 1u) / lanes;
    for (var c0 = 0u; c0 < params.cols; c0 += COLUMNS_AT_ONCE) {
        let n = min(COLUMNS_AT_ONCE, params.cols - c0);
        var base = first;
        var i = 0u;
        var s = tl;
        var raw = load_slice(base + offset, s, n_slices);
        stage_run(c0, n, 0u, lid);
        var sums: ColumnSums;
        // base is the workgroup's, so every subgroup leaves together.
        loop {
            if (base >= params.m) {
                break;
            }
            let row = base + offset;
            let row_end = i + 1u == steps;
            let next_base = select(base, base + stride, row_end);
            let next_s = select(s + lanes, tl, row_end);
            let next = load_slice(next_base + offset, next_s, n_slices);
            if (row < params.m && s < n_slices) {
                let b = s / SLICES;
                dot_run(&sums, slice_prep(raw, s % SLICES), b * (BLOCK / 32u), c0, n);
            }
            if (row_end) {
                store_run(&sums, c0, n, row, tl, row < params.m, false);
                sums = ColumnSums();
            }
            base = next_base;
            s = next_s;
            i = select(i + 1u, 0u, row_end);
            raw = next;
        }
    }
}
// x as the dot4 kernels take it, "q8 groups": each 32 values on two int8 planes. The
// first is x rounded with scale d1 = amax / 127 (llama.cpp's q8_1 activations); the
// second is what the first leaves, x - d1 q1, rounded with d1 / 256, so that a group's
// value is d (256 q1 + q2) with d = d1 / 256: 256 times finer than one plane (issue 22:
// one plane's rounding of groups with an outlier channel gave logit errors twice
// llama.cpp's at some positions, noise that moved with the summation order). The
// matvecs multiply both planes (256 * sum(w q1) + sum(w q2), exact in i32); the matmuls
// of a prompt batch, which are bound by their integer throughput, the first alone.
//
// The dot4 matvec driver quantizes f32 x this way while staging it, and the norms and
// ops/silu_mul_q8 can write it once for every kernel that reads their output
// (ops/q8_round.wgsl), so that the matvecs copy it or read it in place and the matmuls
// stage it. All use this arithmetic, so a pre-quantized x is bit for bit the x the
// matvec would have quantized.
//
// In a buffer (array<vec4<f32>>), group g is the six vec4s from 6g: the first plane's
// first 16 int8 values (4 per word, little-endian) and last 16, its tail (d1, d1 *
// sum(q1), and the sums of the two halves of q1), then the second plane's two halves,
// then the two planes' tail (d, d * sum(256 q1 + q2), and the halves' sums of 256 q1 +
// q2), as `Q8Group` holds them.

// SwiGLU's elementwise part, silu(a) * b: the one formula for the dot4 staging of a
// `glu` route and ops/silu_mul_q8, so that both quantize the same values.
fn silu_times(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return a / (1.0 + exp(-a)) * b;
}

struct Q8Group {
    lo: vec4<u32>,
    hi: vec4<u32>,
    // d1, d1 * (sum_lo + sum_hi), sum_lo, sum_hi (the sums of q1's values, bitcast)
    tail: vec4<f32>,
    lo2: vec4<u32>,
    hi2: vec4<u32>,
    // d, d * (sum_lo + sum_hi), sum_lo, sum_hi (the sums of 256 q1 + q2, bitcast)
    tail2: vec4<f32>,
}

// Values per buffer group (vec4s).
const Q8_GROUP_VEC4S: u32 = 6u;

// 1 / the scale, 0 for a group of zeros.
fn q8_inv(amax: f32) -> f32 {
    return select(0.0, 1.0 / amax, amax > 0.0);
}

// The tail of a group with scale d whose halves' int8 values sum to s_lo and s_hi: the
// one formula for it, so that a tail the norms write is bit for bit a staged one.
fn q8_tail_of(d: f32, s_lo: i32, s_hi: i32) -> vec4<f32> {
    return vec4<f32>(d, d * f32(s_lo + s_hi), bitcast<f32>(s_lo), bitcast<f32>(s_hi));
}

// The sums of a plane's 16-value halves.
fn q8_half_sums(lo: vec4<u32>, hi: vec4<u32>) -> vec2<i32> {
    let ones = 0x01010101u;
    return vec2<i32>(dot4I8Packed(lo.x, ones) + dot4I8Packed(lo.y, ones)
                   + dot4I8Packed(lo.z, ones) + dot4I8Packed(lo.w, ones),
                     dot4I8Packed(hi.x, ones) + dot4I8Packed(hi.y, ones)
                   + dot4I8Packed(hi.z, ones) + dot4I8Packed(hi.w, ones));
}

// The first plane's packed word of four values v and its residual's: the one formula
// for both (q8_group, ops/q8_round.wgsl). `inv` is q8_inv(amax): pack4x8snorm rounds
// clamp(v * inv, -1, 1) * 127 to the nearest integer, q1; the residual v - d1 q1 over
// d1 / 256 is v * 256 * inv * 127 - 256 q1, which pack4x8snorm takes as that over 127.
fn q8_planes(v: vec4<f32>, inv: f32) -> vec2<u32> {
    let p1 = pack4x8snorm(v * inv);
    let q1 = unpack4x8snorm(p1) * 127.0;
    return vec2<u32>(p1, pack4x8snorm((v * inv * 127.0 - q1) * 256.0 / 127.0));
}

// The two planes' tail from their halves' sums: d = amax / (127 * 256).
fn q8_tail2_of(amax: f32, s1: vec2<i32>, s2: vec2<i32>) -> vec4<f32> {
    return q8_tail_of(amax / (127.0 * 256.0), 256 * s1.x + s2.x, 256 * s1.y + s2.y);
}

// One group by one invocation. (ops/q8_round.wgsl spreads a group over eight, with the
// same arithmetic: q8_inv, q8_planes, d1 = amax / 127.)
fn q8_group(v: array<vec4<f32>, 8>) -> Q8Group {
    let a = max(max(max(abs(v[0]), abs(v[1])), max(abs(v[2]), abs(v[3]))),
                max(max(abs(v[4]), abs(v[5])), max(abs(v[6]), abs(v[7]))));
    let amax = max(max(a.x, a.y), max(a.z, a.w));
    let inv = q8_inv(amax);
    let w0 = q8_planes(v[0], inv);
    let w1 = q8_planes(v[1], inv);
    let w2 = q8_planes(v[2], inv);
    let w3 = q8_planes(v[3], inv);
    let w4 = q8_planes(v[4], inv);
    let w5 = q8_planes(v[5], inv);
    let w6 = q8_planes(v[6], inv);
    let w7 = q8_planes(v[7], inv);
    let lo = vec4<u32>(w0.x, w1.x, w2.x, w3.x);
    let hi = vec4<u32>(w4.x, w5.x, w6.x, w7.x);
    let lo2 = vec4<u32>(w0.y, w1.y, w2.y, w3.y);
    let hi2 = vec4<u32>(w4.y, w5.y, w6.y, w7.y);
    let s1 = q8_half_sums(lo, hi);
    let s2 = q8_half_sums(lo2, hi2);
    return Q8Group(lo, hi, q8_tail_of(amax / 127.0, s1.x, s1.y), lo2, hi2,
                   q8_tail2_of(amax, s1, s2));
}

// Q6_K with int8 x: 256 weights per 210-byte super-block
//   {ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16}
// Weight n = 128 h + 32 r + l (h = 0..2, r = 0..4, l = 0..32) takes its low 4 bits from
// nibble r / 2 of ql[64 h + 32 (r % 2) + l], its top 2 bits from bits 2r..2r+2 of
// qh[32 h + l], and value d * scales[8 h + 2 r + l / 16] * (q - 32).
//
// Slice j (0..4) is half hh = j % 2 of the positions l of part h = j / 2: l = 16 hh ..
// + 16 of all four runs r, 64 weights under four scales. It reads two 16-byte pieces
// of ql (bytes 64 h + 16 hh and 64 h + 32 + 16 hh: low nibbles runs 0 and 1, high
// nibbles runs 2 and 3) and one of qh (bytes 32 h + 16 hh, all four runs' top bits).
// On the H200 these 64-weight slices beat 32-weight ones (one ql piece per lane): the
// block's d, scales and qh are read and decoded half as often.

// 210-byte blocks would leave every other block only 2-byte aligned, so the weights
// are uploaded as `Layout::BodiesFirst`: the first 208 bytes {ql, qh, scales} of every
// block of the dispatch's rows, 13 vec4s each, then every block's d. Each field of a
// slice is then one aligned vec4 load, where the GGUF layout took 13 word loads.
//
// The quants q - 32 go to dot4I8Packed as signed int8: q's six bits with bit 5 flipped
// are q - 32 in six-bit two's complement, and bit 5 copied to bits 6 and 7 makes it
// eight. The integer sums are exact either way, so this is bit for bit what
// sum(q * xq) - 32 * sum(xq) gave, without a per-half sum of x staged beside it.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 4u;
// The lanes of a block read halves hh of groups 4h + r: neighbouring blocks' lanes
// already fall on distinct bank sets (groups 8 apart sit 9 slots apart), any skew will do.
const HALF_SKEW: u32 = 2u;
// One slice at a time: a slice holds five loads (see `row_partial`).
const STEP: u32 = 1u;

// A run's 16 quants q - 32 as signed int8: nibbles at bit n of `ql`'s bytes, top bits
// already at bits 4..5 of `top`'s bytes.
fn run_quants(ql: vec4<u32>, top: vec4<u32>, n: u32) -> vec4<u32> {
    let q = ((ql >> vec4<u32>(n)) & vec4<u32>(0x0f0f0f0fu)) | (top & vec4<u32>(0x30303030u));
    let flipped = q ^ vec4<u32>(0x20202020u);
    // 0x20 * 6 = 0xc0 within each byte: no carry into the next.
    return flipped | ((flipped & vec4<u32>(0x20202020u)) * 6u);
}

// A slice's loads apart from its arithmetic (dot4_prefetch.wgsl): its two ql pieces,
// its qh piece, the block's scales and the vec4 holding its d, and the block's index
// (which half-word of that vec4 is d).
struct Raw {
    ql0: vec4<u32>,
    ql1: vec4<u32>,
    qh: vec4<u32>,
    sc: vec4<u32>,
    dv: vec4<u32>,
    n: u32,
}

fn slice_load(row_byte: u32, blk: u32, j: u32) -> Raw {
    // Block n of the binding: rows are whole blocks, so row_byte / 210 blocks precede.
    let n = row_byte / 210u + blk;
    let body = 13u * n;
    let h = j >> 1u;
    let hh = j & 1u;
    // d: after the bodies of all m * k / 256 blocks, 2 bytes each.
    return Raw(w[body + 4u * h + hh], w[body + 4u * h + 2u + hh], w[body + 8u + 2u * h + hh],
               w[body + 12u], w[13u * params.m * (params.k / BLOCK) + n / 8u], n);
}

// What a slice's dot products need of its weights, once however many columns it is
// dotted with (dot4_prefetch.wgsl's `columns_at_once`): the four runs' quants, their
// scales, d, the x group of run 0 past the block's first, and the half of the groups.
struct Prep {
    r0: vec4<u32>,
    r1: vec4<u32>,
    r2: vec4<u32>,
    r3: vec4<u32>,
    scales: vec4<i32>,
    d: f32,
    g_off: u32,
    hh: u32,
}

fn slice_prep(r: Raw, j: u32) -> Prep {
    let h = j >> 1u;
    let hh = j & 1u;
    // Scales 8h + 2r + hh: runs 0 and 1 at bytes hh and 2 + hh of the part's first
    // word, runs 2 and 3 likewise of its second.
    let s01 = bitcast<i32>(select(r.sc.x, r.sc.z, h == 1u));
    let s23 = bitcast<i32>(select(r.sc.y, r.sc.w, h == 1u));
    let sh = 8u * hh;
    let d = unpack2x16float(r.dv[(r.n / 2u) % 4u] >> (16u * (r.n % 2u))).x;
    // Run r's top bits are bits 2r..2r+2 of qh's bytes, moved to bits 4..5.
    return Prep(run_quants(r.ql0, r.qh << vec4<u32>(4u), 0u),
                run_quants(r.ql1, r.qh << vec4<u32>(2u), 0u),
                run_quants(r.ql0, r.qh, 4u),
                run_quants(r.ql1, r.qh >> vec4<u32>(2u), 4u),
                vec4<i32>(extractBits(s01, sh, 8u), extractBits(s01, sh + 16u, 8u),
                          extractBits(s23, sh, 8u), extractBits(s23, sh + 16u, 8u)),
                d, 4u * h, hh);
}

// The slice's dot product with x from group g + its g_off, g the block's first group.
fn prep_math(p: Prep, g: u32) -> f32 {
    let g0 = g + p.g_off;
    let sums = vec4<i32>(xdot16(p.r0, g0, p.hh), xdot16(p.r1, g0 + 1u, p.hh),
                         xdot16(p.r2, g0 + 2u, p.hh), xdot16(p.r3, g0 + 3u, p.hh));
    // Scales multiply the integer sums as integers: one conversion per run.
    let scaled = sums * p.scales;
    return p.d * (xd(g0) * f32(scaled.x) + xd(g0 + 1u) * f32(scaled.y)
              + xd(g0 + 2u) * f32(scaled.z) + xd(g0 + 3u) * f32(scaled.w));
}

fn slice_math(r: Raw, j: u32, g: u32) -> f32 {
    return prep_math(slice_prep(r, j), g);
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    return slice_math(slice_load(row_byte, blk, j), j, g);
}
