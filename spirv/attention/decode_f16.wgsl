const WG: u32 = 128u;
const HD: u32 = 128u;
const KV_ROW: u32 = 64u;
const G: u32 = 4u;
const TEAM: u32 = 16u;
const LW: u32 = 1u;
const MERGE: u32 = 1u;

// attention/decode's view of an f16 KV cache: the row of one position and KV head (HD
// values, a multiple of 8) is HD / 8 words of 16 bytes, 8 values each. The includer
// (`attention/decode.wgsl`) declares `q`, `k_cache` and `v_cache` (arrays of vec4) and
// Word; the host sets HD and KV_ROW (u32s a row).

const WORD_VALUES: u32 = 8u;
// 16-byte words of a row, and the ones that hold values (all of them here).
const ROW_WORDS: u32 = KV_ROW / 4u;
const DATA_WORDS: u32 = HD / 8u;

struct Vals {
    a: vec4<f32>,
    b: vec4<f32>,
}

fn vals_zero() -> Vals {
    return Vals(vec4<f32>(0.0), vec4<f32>(0.0));
}

fn vals_dot(x: Vals, y: Vals) -> f32 {
    return dot(x.a, y.a) + dot(x.b, y.b);
}

fn vals_scaled(x: Vals, r: f32) -> Vals {
    return Vals(x.a * r, x.b * r);
}

// x + e * v
fn vals_mad(x: Vals, e: f32, v: Vals) -> Vals {
    return Vals(fma(vec4<f32>(e), v.a, x.a), fma(vec4<f32>(e), v.b, x.b));
}

// The i-th 4 of a word's values.
fn vals_part(x: Vals, i: u32) -> vec4<f32> {
    return select(x.a, x.b, i == 1u);
}

fn unpacked(w: vec4<u32>) -> Vals {
    return Vals(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
                vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));
}

// Word w of cache row `row` (position * n_kv_heads + KV head); its scale is 1.
fn k_word(row: u32, w: u32) -> Word {
    return Word(unpacked(k_cache[row * ROW_WORDS + w]), 1.0);
}

fn v_word(row: u32, w: u32) -> Word {
    return Word(unpacked(v_cache[row * ROW_WORDS + w]), 1.0);
}

// Word w of the query head whose values start at element `at` of q (a multiple of 4).
fn q_vals(at: u32, w: u32) -> Vals {
    let i = at / 4u + 2u * w;
    return Vals(q[i], q[i + 1u]);
}
// The row table of a decode step over many sequences (`AttentionRow` on the host): one
// entry per row of the step, written by the host each step. Row r's q, k and v are row r
// of the qkv rows; its sequence's cache rows are `cache_first + position`, and it attends
// to positions window_first..=pos in `n_chunks` chunks of `chunk` (the split a step of
// this row alone takes, so a row's reduction order never depends on the other rows).

struct AttRow {
    pos: u32,
    cache_first: u32,
    window_first: u32,
    chunk: u32,
    n_chunks: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}
// What both decode attention kernels (`attention/decode.wgsl` and
// `attention/decode_portable.wgsl`) take and write, in the same bindings, so one
// dispatch shape serves both. Each kernel names the element types it reads and writes
// them in (QRead, KvRead, OutWord: pairs, or 16-byte words); HD is the host's.
//
// A dispatch serves the rows of a step: row r (its q at r * q_stride of `q`, its output
// at r * out_stride of `out`, its partials after the r rows before it) attends to its
// sequence's cache rows as its entry of the row table says (`attention/rows.wgsl`). A
// lone sequence's step is the one-row case of the same shader, so its bits are the same
// whatever other rows share a step. The grid is (the most chunks of any row, KV heads,
// head groups * rows); a workgroup past its row's chunks does nothing.


struct Params {
    n_kv_heads: u32,
    group: u32,   // query heads per KV head
    scale: f32,
    part_stride: u32, // partial slots per query head: the most chunks, rounded up to 32
    q_stride: u32,    // elements from one row's q to the next's
    out_stride: u32,  // elements from one row's output to the next's
    _pad1: u32,
    _pad2: u32,
}

// Where workgroup (c, kvh, row * head groups + hg) works: its row, that row's table
// entry, its chunk, KV head and head group, its first query head h0 and query heads (of
// the row), the query heads of the rows before, and its positions p0..p1 as cache rows
// (the sequence's region starts at cache_first). Past the row's chunks (`live` false)
// the workgroup leaves at once; the grid has the most chunks of any row.
struct Place {
    r: u32,
    row: AttRow,
    c: u32,
    kvh: u32,
    hg: u32,
    // Head groups per KV head.
    groups: u32,
    h0: u32,
    heads: u32,
    row_heads: u32,
    p0: u32,
    p1: u32,
    live: bool,
}

fn place_of(wid: vec3<u32>) -> Place {
    let groups = (params.group + G - 1u) / G;
    let r = wid.z / groups;
    let row = att_rows[r];
    let c = wid.x;
    let hg = wid.z % groups;
    let g0 = hg * G;
    let p0 = row.cache_first + row.window_first + c * row.chunk;
    let p1 = min(p0 + row.chunk, row.cache_first + row.pos + 1u);
    return Place(r, row, c, wid.y, hg, groups, wid.y * params.group + g0,
                 min(G, params.group - g0), r * params.n_kv_heads * params.group, p0, p1,
                 c < row.n_chunks);
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<QRead>;
@group(0) @binding(2) var<storage, read> k_cache: array<KvRead>;
@group(0) @binding(3) var<storage, read> v_cache: array<KvRead>;
// Per row r, query head h and chunk c, at (r * heads + h) * part_stride + c: (m, l). A
// head's slots start 256 bytes apart, so no cache line holds two heads' partials (see
// decode_merge).
// Elements of PartMl and PartAcc, the kernel's: pairs or words, or u32 atomics where the
// kernel merges in the dispatch itself (`decode_merge.wgsl`).
@group(0) @binding(4) var<storage, read_write> part_ml: array<PartMl>;
// Per row, query head and chunk (a slot, as in part_ml), HD values at slot * HD.
@group(0) @binding(5) var<storage, read_write> part_acc: array<PartAcc>;
@group(0) @binding(6) var<storage, read_write> out: array<OutWord>;
@group(0) @binding(7) var<storage, read> att_rows: array<AttRow>;

const HALF: u32 = HD / 2u;
// What both merges of split decode attention (`attention/combine.wgsl` and
// `attention/decode_merge.wgsl`) read first of four chunks of a query head. The includer
// gives ml_at(slot), a slot's (m, l), and NO_SCORE; `n` is the row's chunks.

// Chunks c..c + 4 of the head whose first slot is `first`: their maxes (NO_SCORE past
// the last chunk, so the copies weigh nothing), sums, and the slots read (clamped to
// the last chunk's).
struct FourMl {
    m: vec4<f32>,
    l: vec4<f32>,
    slots: vec4<u32>,
}

fn four_ml(first: u32, c: u32, n: u32) -> FourMl {
    let cs = vec4<u32>(c) + vec4<u32>(0u, 1u, 2u, 3u);
    let s = vec4<u32>(first) + min(cs, vec4<u32>(n - 1u));
    let ml0 = ml_at(s.x);
    let ml1 = ml_at(s.y);
    let ml2 = ml_at(s.z);
    let ml3 = ml_at(s.w);
    let real = cs < vec4<u32>(n);
    return FourMl(select(vec4<f32>(NO_SCORE), vec4<f32>(ml0.x, ml1.x, ml2.x, ml3.x), real),
                  vec4<f32>(ml0.y, ml1.y, ml2.y, ml3.y), s);
}
// Split-K decode attention's merge in the decode dispatch itself (MERGE = 1): each
// workgroup of a column (one KV head and head group, every chunk) counts itself done
// after its partials are written, and the last one merges the column's chunks, so no
// second dispatch waits on the first one's tail. With M the largest chunk max of a
// head, L = sum_c l_c exp(m_c - M) and out = sum_c acc_c exp(m_c - M) / L.
//
// Why the last workgroup sees the others' partials: every workgroup's writes are
// ordered before its count by a device-scope barrier (SPIR-V: a control barrier with
// device memory scope and acquire-release semantics), and the last one's reads after
// its count by another; and the partials are written and read as atomics, which no
// compute unit's cache serves stale. Plain loads were not enough: on the H200 the
// merger of a single column read partials older than the others' writes, in three runs
// out of three (`decode_attention_matches_the_reference`, f32 2/1x32 over 1,000
// positions; the windowed f16 and q8_0 cases too; `results/attention_merge`). Metal's
// threadgroup_barrier orders device memory only within a threadgroup, so the router
// keeps the combine pass there.
//
// The merge is a few memory round trips long: each invocation merges one quad of a
// head's values over all the chunks, 20 chunks' reads in flight a round (straight-line
// code, as in `attention/combine.wgsl`). The includer (`attention/decode.wgsl`) gives
// params, part_ml, part_acc, out (16-byte words), HD, WG, NO_SCORE and max4.


// The partials, out and back through atomics (see above): a u32 at a time, bitcast.
fn put_ml(slot: u32, ml: vec2<f32>) {
    atomicStore(&part_ml[2u * slot], bitcast<u32>(ml.x));
    atomicStore(&part_ml[2u * slot + 1u], bitcast<u32>(ml.y));
}

fn ml_at(slot: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(atomicLoad(&part_ml[2u * slot])),
                     bitcast<f32>(atomicLoad(&part_ml[2u * slot + 1u])));
}

// Word i (four values) of the accumulators.
fn put_acc(i: u32, v: vec4<f32>) {
    for (var j = 0u; j < 4u; j++) {
        atomicStore(&part_acc[4u * i + j], bitcast<u32>(v[j]));
    }
}

fn acc_at(i: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(atomicLoad(&part_acc[4u * i])),
                     bitcast<f32>(atomicLoad(&part_acc[4u * i + 1u])),
                     bitcast<f32>(atomicLoad(&part_acc[4u * i + 2u])),
                     bitcast<f32>(atomicLoad(&part_acc[4u * i + 3u])));
}

// Per column ((row * KV heads + KV head) * head groups + head group): its chunks done in
// this step. The
// last one sets it back to 0, so every step starts from zeros (the buffer's first).
@group(0) @binding(8) var<storage, read_write> merge_count: array<atomic<u32>>;
var<workgroup> merging: u32;

const MERGE_ROUND: u32 = 20u;
const QUADS: u32 = HD / 4u;

// Whether this workgroup is the last of `column`'s `n_chunks` to finish its chunk. Call in
// uniform control flow, after the partials are written.
fn last_of_column(column: u32, n_chunks: u32, lid: u32) -> bool {
    storageBarrier();
    if (lid == 0u) {
        let done = atomicAdd(&merge_count[column], 1u) + 1u;
        let last = done == n_chunks;
        if (last) {
            atomicStore(&merge_count[column], 0u);
        }
        merging = select(0u, 1u, last);
    }
    return workgroupUniformLoad(&merging) == 1u;
}

// Four chunks at one quad: their maxes (NO_SCORE past the last chunk), sums and
// accumulators.
struct Four {
    m: vec4<f32>,
    l: vec4<f32>,
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
}

// Chunks c..c + 4 of the head whose first slot is `first` (see merge_ml.wgsl).
fn four_chunks(first: u32, c: u32, n: u32, quad: u32) -> Four {
    let ml = four_ml(first, c, n);
    let s = ml.slots;
    return Four(ml.m, ml.l, acc_at(s.x * QUADS + quad), acc_at(s.y * QUADS + quad),
                acc_at(s.z * QUADS + quad), acc_at(s.w * QUADS + quad));
}

// The running (m, l, acc) of one quad.
struct Merged {
    m: f32,
    l: f32,
    acc: vec4<f32>,
}

// `run` with four chunks added, all scaled to the max m (at least theirs and run's).
fn add_four(run: Merged, m: f32, f: Four) -> Merged {
    let w = exp(f.m - m);
    return Merged(m, run.l + dot(w, f.l),
                  run.acc + w.x * f.a0 + w.y * f.a1 + w.z * f.a2 + w.w * f.a3);
}

// Merges a row's `n` chunks of its query heads h0..h0 + heads into `out`: the row's
// partial slots are those of heads `row_heads` (the rows before it) + h, its output at
// element `out_at`.
fn merge_chunks(h0: u32, heads: u32, row_heads: u32, out_at: u32, n: u32, lid: u32) {
    storageBarrier();
    for (var i = lid; i < heads * QUADS; i += WG) {
        let h = h0 + i / QUADS;
        let quad = i % QUADS;
        let first = (row_heads + h) * params.part_stride;
        var run = Merged(NO_SCORE, 0.0, vec4<f32>(0.0));
        for (var c = 0u; c < n; c += MERGE_ROUND) {
            let f0 = four_chunks(first, c, n, quad);
            let f1 = four_chunks(first, c + 4u, n, quad);
            let f2 = four_chunks(first, c + 8u, n, quad);
            let f3 = four_chunks(first, c + 12u, n, quad);
            let f4 = four_chunks(first, c + 16u, n, quad);
            let m = max(run.m, max4(max(max(max(f0.m, f1.m), max(f2.m, f3.m)), f4.m)));
            let r = exp(run.m - m);
            run = Merged(m, run.l * r, run.acc * r);
            run = add_four(add_four(add_four(add_four(add_four(run, m, f0), m, f1), m, f2),
                                    m, f3), m, f4);
        }
        out[out_at / 4u + h * QUADS + quad] = run.acc / run.l;
    }
}
// Split-K decode attention (flash-decoding) on subgroups. Workgroup (c, kvh, hg) takes
// the positions of chunk c for the (up to 4) query heads of head group hg that read KV
// head kvh, so each K and V byte of a chunk is read by one workgroup whatever the GQA
// ratio, and the chunks spread a long context over the whole GPU.
//
// What a decode step waits on is memory latency, so the kernel is written to keep many
// independent reads in flight. A team of TEAM lanes (a power of two, at least 4 and no
// larger than the smallest subgroup) reads a cache row in 16-byte words, LW words per
// lane (1 wherever the subgroup is as wide as a row's words), and takes ROWS = 4
// positions a step: the four rows' K and V words are read together, in straight-line
// code, a step ahead (a step's rows at the lane's first word load while the step before
// is scored, the first step's while the query is staged). Private arrays are avoided
// (drivers move them to slow local memory); the loops over a lane's words run one trip
// where LW is 1.
//
// Each lane scores the four rows against all four query head slots (a vec4 per head;
// slots past the group score zeros and are never stored). The team sums its lanes'
// parts by a reduce-scatter that leaves each quarter of the team with one slot's four
// scores, so each lane keeps the online softmax (a running max m and sum l) of one slot
// and takes its exps once a team instead of in every lane; the weights of all four
// slots are then handed to every lane for its V words. The accumulators of exp(s - m) v
// per head and word are in registers where a lane holds one word, else in workgroup
// memory. A word's scale (q8_0's; 1 for plain formats) multiplies the dot products and
// the weights, not every value. The position loop is uniform over the workgroup (rows
// past the chunk are read clamped and weigh nothing), so every shuffle runs in uniform
// control flow, as Metal wants. At the end the workgroup merges its teams: with one
// chunk it writes the normalized output, otherwise (m, l) and the accumulator per query
// head, which the last workgroup of the KV head and head group to finish merges
// (`attention/decode_merge.wgsl`, MERGE = 1) or `attention/combine.wgsl` does (MERGE =
// 0).
//
// The host sets WG (invocations, a multiple of the largest subgroup), HD, KV_ROW, G
// (query heads per workgroup, at most 4), TEAM, LW (a row's value words over TEAM,
// rounded up) and MERGE. The format include gives WORD_VALUES, DATA_WORDS, Vals and its
// arithmetic, k_word, v_word and q_vals; the bindings are `attention/decode_io.wgsl`'s,
// in 16-byte words, and decode_merge's count of finished chunks.


alias QRead = vec4<f32>;
alias KvRead = vec4<u32>;
alias OutWord = vec4<f32>;
// The partials as u32 atomics (`put_ml`, `ml_at`, `put_acc`, `acc_at` in
// decode_merge.wgsl), so the merging workgroup reads what the others wrote.
alias PartMl = atomic<u32>;
alias PartAcc = atomic<u32>;

const NO_SCORE: f32 = -3.0e38;
const ROWS: u32 = 4u;
const TEAMS: u32 = WG / TEAM;
const WORD_VEC4S: u32 = WORD_VALUES / 4u;
// Lanes of a team that score one head slot (TEAM is at least 4).
const SLOT_LANES: u32 = TEAM / 4u;

// A word of the cache: values v times scale d (1 for plain formats).
struct Word {
    v: Vals,
    d: f32,
}

// One team's ROWS positions of a step at one word of K or of V.
struct Rows {
    r0: Word,
    r1: Word,
    r2: Word,
    r3: Word,
}

// Query heads (4 slots), scaled, by word.
var<workgroup> q_words: array<Vals, 4u * DATA_WORDS>;
// Per team, head and word: the accumulator (live where LW > 1, merged at the end).
var<workgroup> team_acc: array<Vals, TEAMS * G * DATA_WORDS>;
// Per team: m (first TEAMS) and l (next TEAMS), a vec4 over heads.
var<workgroup> team_ml: array<vec4<f32>, 2u * TEAMS>;

fn max4(v: vec4<f32>) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

// acc * r + e.x v0 + e.y v1 + e.z v2 + e.w v3
fn fold(acc: Vals, r: f32, e: vec4<f32>, v0: Vals, v1: Vals, v2: Vals, v3: Vals) -> Vals {
    return vals_mad(vals_mad(vals_mad(vals_mad(vals_scaled(acc, r), e.x, v0), e.y, v1), e.z, v2),
                    e.w, v3);
}

// The lane's scores of four rows (by position) against query head slot g at word w.
fn word_scores(g: u32, w: u32, k: Rows) -> vec4<f32> {
    let qg = q_words[g * DATA_WORDS + w];
    return vec4<f32>(vals_dot(qg, k.r0.v) * k.r0.d, vals_dot(qg, k.r1.v) * k.r1.d,
                     vals_dot(qg, k.r2.v) * k.r2.d, vals_dot(qg, k.r3.v) * k.r3.d);
}

// acc * r + the weights e (times each row's scale) of v's four rows.
fn fold_rows(acc: Vals, r: f32, e: vec4<f32>, v: Rows) -> Vals {
    let ed = e * vec4<f32>(v.r0.d, v.r1.d, v.r2.d, v.r3.d);
    return fold(acc, r, ed, v.r0.v, v.r1.v, v.r2.v, v.r3.v);
}

// Cache row of position t (clamped to `last`, which is in the cache) of KV head kvh.
fn row_of(t: u32, last: u32, kvh: u32) -> u32 {
    return min(t, last) * params.n_kv_heads + kvh;
}

// K (or V) of positions t..t + 4 (clamped) at word w.
fn k_rows(t: u32, last: u32, kvh: u32, w: u32) -> Rows {
    return Rows(k_word(row_of(t, last, kvh), w), k_word(row_of(t + 1u, last, kvh), w),
                k_word(row_of(t + 2u, last, kvh), w), k_word(row_of(t + 3u, last, kvh), w));
}

fn v_rows(t: u32, last: u32, kvh: u32, w: u32) -> Rows {
    return Rows(v_word(row_of(t, last, kvh), w), v_word(row_of(t + 1u, last, kvh), w),
                v_word(row_of(t + 2u, last, kvh), w), v_word(row_of(t + 3u, last, kvh), w));
}

// Where a lane reads: its team, its place in the team, the subgroup lane of the team's
// first, the KV head, and the chunk's end and last row.
struct Lane {
    team: u32,
    lt: u32,
    first: u32,
    kvh: u32,
    p1: u32,
    last: u32,
}

// A team's online softmax for the lane's head slot: the running max m and sum l and,
// where a lane holds one word (LW = 1), its accumulator for every slot (the V words it
// reads serve all four).
struct Softmax {
    m: f32,
    l: f32,
    a0: Vals,
    a1: Vals,
    a2: Vals,
    a3: Vals,
}

// The team's scores of the step's four rows for the lane's head slot, from every lane's
// parts of all 16 (a vec4 over rows per slot): a reduce-scatter, so that no lane sums
// what it will not use. The lanes of the team's upper half keep slots 2 and 3 and send
// 0 and 1 (and the lower half the other way round), the lanes at odd multiples of
// SLOT_LANES then keep the odd slot of their pair, and the SLOT_LANES lanes left on one
// slot sum the rest by butterfly.
fn team_scores(lt: u32, s0: vec4<f32>, s1: vec4<f32>, s2: vec4<f32>, s3: vec4<f32>) -> vec4<f32> {
    let upper = (lt & (TEAM / 2u)) != 0u;
    let a = select(s0, s2, upper) + subgroupShuffleXor(select(s2, s0, upper), TEAM / 2u);
    let b = select(s1, s3, upper) + subgroupShuffleXor(select(s3, s1, upper), TEAM / 2u);
    let odd = (lt & SLOT_LANES) != 0u;
    var s = select(a, b, odd) + subgroupShuffleXor(select(b, a, odd), SLOT_LANES);
    for (var o = SLOT_LANES / 2u; o > 0u; o /= 2u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}

// `st` with the team's positions t..t + 4 of a step folded in; k0 and v0 are their
// rows at the lane's first word (the rest, where LW > 1, are read here).
fn fold_step(st: Softmax, ln: Lane, t: u32, k0: Rows, v0: Rows) -> Softmax {
    let lt = ln.lt;
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    var s3 = vec4<f32>(0.0);
    for (var j = 0u; j < LW; j++) {
        let w = min(lt + j * TEAM, DATA_WORDS - 1u);
        var k = k0;
        if (j > 0u) {
            k = k_rows(t, ln.last, ln.kvh, w);
        }
        let live = select(0.0, 1.0, lt + j * TEAM < DATA_WORDS);
        s0 += live * word_scores(0u, w, k);
        s1 += live * word_scores(1u, w, k);
        s2 += live * word_scores(2u, w, k);
        s3 += live * word_scores(3u, w, k);
    }
    let valid = vec4<u32>(t) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(ln.p1);
    let s = select(vec4<f32>(NO_SCORE), team_scores(lt, s0, s1, s2, s3), valid);
    let m = max(st.m, max4(s));
    // Rows past the chunk weigh nothing, also for a team that has seen no row yet (its
    // m is still NO_SCORE).
    let e = select(vec4<f32>(0.0), exp(s - m), valid);
    let r = exp(st.m - m);
    let l = st.l * r + dot(e, vec4<f32>(1.0));
    // Every lane weighs its V words by every slot's weights and rescaling, which the
    // first lane of each slot hands round.
    let e0 = subgroupShuffle(e, ln.first);
    let e1 = subgroupShuffle(e, ln.first + SLOT_LANES);
    let e2 = subgroupShuffle(e, ln.first + 2u * SLOT_LANES);
    let e3 = subgroupShuffle(e, ln.first + 3u * SLOT_LANES);
    let rs = vec4<f32>(subgroupShuffle(r, ln.first), subgroupShuffle(r, ln.first + SLOT_LANES),
                       subgroupShuffle(r, ln.first + 2u * SLOT_LANES),
                       subgroupShuffle(r, ln.first + 3u * SLOT_LANES));
    if (LW == 1u) {
        return Softmax(m, l, fold_rows(st.a0, rs.x, e0, v0), fold_rows(st.a1, rs.y, e1, v0),
                       fold_rows(st.a2, rs.z, e2, v0), fold_rows(st.a3, rs.w, e3, v0));
    }
    for (var j = 0u; j < LW; j++) {
        let w = lt + j * TEAM;
        if (w < DATA_WORDS) {
            var v = v0;
            if (j > 0u) {
                v = v_rows(t, ln.last, ln.kvh, w);
            }
            for (var g = 0u; g < G; g++) {
                let at = (ln.team * G + g) * DATA_WORDS + w;
                let eg = select(select(e0, e1, g == 1u), select(e2, e3, g == 3u), g >= 2u);
                team_acc[at] = fold_rows(team_acc[at], rs[g], eg, v);
            }
        }
    }
    return Softmax(m, l, st.a0, st.a1, st.a2, st.a3);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sub: u32,
        @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) sg: u32) {
    let pl = place_of(wid);
    if (!pl.live) {
        return;
    }
    let row = pl.row;
    let c = pl.c;
    let kvh = pl.kvh;
    let h0 = pl.h0;
    let heads = pl.heads;
    let row_heads = pl.row_heads;
    let p0 = pl.p0;
    let p1 = pl.p1;
    let last = p1 - 1u;

    let team = sub * (sg / TEAM) + lane / TEAM;
    let lt = lane % TEAM;

    for (var i = lid; i < 4u * DATA_WORDS; i += WG) {
        let g = i / DATA_WORDS;
        var v = vals_zero();
        if (g < heads) {
            v = vals_scaled(q_vals(pl.r * params.q_stride + (h0 + g) * HD, i % DATA_WORDS),
                            params.scale);
        }
        q_words[i] = v;
    }
    if (LW > 1u) {
        for (var j = 0u; j < LW; j++) {
            let w = lt + j * TEAM;
            for (var g = 0u; g < G; g++) {
                if (w < DATA_WORDS) {
                    team_acc[(team * G + g) * DATA_WORDS + w] = vals_zero();
                }
            }
        }
    }
    // The lane's first word (clamped: lanes past a row's words read its last and add
    // nothing), and whether it is a real one.
    let w0 = min(lt, DATA_WORDS - 1u);
    let live0 = lt < DATA_WORDS;
    let step = TEAMS * ROWS;
    // The first word's K and V rows of a step are read a step ahead (the reads after
    // the last step are clamped to the chunk's last row and never used).
    var k = k_rows(p0 + team * ROWS, last, kvh, w0);
    var v = v_rows(p0 + team * ROWS, last, kvh, w0);
    workgroupBarrier();

    let ln = Lane(team, lt, lane - lt, kvh, p1, last);
    var st = Softmax(NO_SCORE, 0.0, vals_zero(), vals_zero(), vals_zero(), vals_zero());
    for (var base = p0; base < p1; base += step) {
        let t = base + team * ROWS;
        let k_next = k_rows(t + step, last, kvh, w0);
        let v_next = v_rows(t + step, last, kvh, w0);
        st = fold_step(st, ln, t, k, v);
        k = k_next;
        v = v_next;
    }

    if (LW == 1u && live0) {
        let at = team * G * DATA_WORDS + w0;
        team_acc[at] = st.a0;
        if (G > 1u) {
            team_acc[at + DATA_WORDS] = st.a1;
        }
        if (G > 2u) {
            team_acc[at + 2u * DATA_WORDS] = st.a2;
        }
        if (G > 3u) {
            team_acc[at + 3u * DATA_WORDS] = st.a3;
        }
    }
    if (lt % SLOT_LANES == 0u) {
        let slot = lt / SLOT_LANES;
        team_ml[team][slot] = st.m;
        team_ml[TEAMS + team][slot] = st.l;
    }
    workgroupBarrier();

    // The teams merged: with M the largest team max of a head, each team's accumulator
    // counts exp(m - M).
    let one_chunk = row.n_chunks == 1u;
    let out_at = pl.r * params.out_stride;
    for (var i = lid; i < heads * DATA_WORDS; i += WG) {
        let g = i / DATA_WORDS;
        let w = i % DATA_WORDS;
        var big_m = NO_SCORE;
        for (var tm = 0u; tm < TEAMS; tm++) {
            big_m = max(big_m, team_ml[tm][g]);
        }
        var big_l = 0.0;
        var sum = vals_zero();
        for (var tm = 0u; tm < TEAMS; tm++) {
            let f = exp(team_ml[tm][g] - big_m);
            big_l += team_ml[TEAMS + tm][g] * f;
            sum = vals_mad(sum, f, team_acc[(tm * G + g) * DATA_WORDS + w]);
        }
        let h = h0 + g;
        if (one_chunk) {
            let first = (out_at + h * HD + w * WORD_VALUES) / 4u;
            let norm = vals_scaled(sum, 1.0 / big_l);
            for (var k = 0u; k < WORD_VEC4S; k++) {
                out[first + k] = vals_part(norm, k);
            }
        } else {
            let slot = (row_heads + h) * params.part_stride + c;
            let first = (slot * HD + w * WORD_VALUES) / 4u;
            for (var k = 0u; k < WORD_VEC4S; k++) {
                put_acc(first + k, vals_part(sum, k));
            }
            if (w == 0u) {
                put_ml(slot, vec2<f32>(big_m, big_l));
            }
        }
    }
    let column = (pl.r * params.n_kv_heads + kvh) * pl.groups + pl.hg;
    if (MERGE == 1u && !one_chunk && last_of_column(column, row.n_chunks, lid)) {
        merge_chunks(h0, heads, row_heads, out_at, row.n_chunks, lid);
    }
}

// attention/decode over an f16 KV cache.
