enable f16;
enable wgpu_cooperative_matrix;
const S: u32 = 16u;
alias CT = f16;
alias MatA = coop_mat16x16<f16, A>;
alias MatB = coop_mat16x16<f16, B>;
alias MatC = coop_mat16x16<f32, C>;
const SUBGROUP_MAX: u32 = 32u;
const HD: u32 = 128u;
const HDP: u32 = 128u;
const KV_ROW: u32 = 64u;
const ROWS: u32 = 64u;
const KT: u32 = 64u;
const OUT_BLOCKS: u32 = 4u;
const TEAM: u32 = 4u;
const SC_LEN: u32 = 4608u;
const KV_LEN: u32 = 9216u;

// KV cache in f16: a u32 per pair of values (no SHADER_F16 needed). Rounding to f16
// costs about 2^-11 of each value relative; a value past 65504 becomes infinite, and
// the logits' non-finite check reports it.

alias KvWord = u32;

fn kv_pair(w: KvWord) -> vec2<f32> {
    return unpack2x16float(w);
}

fn kv_word(v: vec2<f32>) -> KvWord {
    return pack2x16float(v);
}
// A head's value pairs in a plain (f32 or f16) KV cache, for the kernels that read the
// cache a pair at a time (`attention/prefill.wgsl`, `attention/flash.wgsl`,
// `attention/decode_portable.wgsl`): cache row `row` (position * n_kv_heads + KV head)
// is KV_ROW words of one pair each. The includer declares `k_cache` and `v_cache`; the
// format include gives KvWord and kv_pair; the host sets KV_ROW.
//
// A pair can be read in two steps, its raw words (k_raw, v_raw: a KvRaw, zero-valued
// where there is no pair) then its values (raw_pair), so that a kernel can issue its
// loads a phase before it needs the values.

alias KvRaw = KvWord;

fn k_raw(row: u32, p: u32) -> KvRaw {
    return k_cache[row * KV_ROW + p];
}

fn v_raw(row: u32, p: u32) -> KvRaw {
    return v_cache[row * KV_ROW + p];
}

fn raw_pair(raw: KvRaw, p: u32) -> vec2<f32> {
    return kv_pair(raw);
}

fn k_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(k_raw(row, p), p);
}

fn v_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(v_raw(row, p), p);
}
// What the prompt attention kernels (prefill.wgsl, flash.wgsl) share: their parameters
// and bindings, and where a (token, query head) row's token sits, which keys it sees and
// where its values are. The includer sets HD; the format include gives KvWord.

struct Params {
    n_kv_heads: u32,
    group: u32,       // query heads per KV head
    start: u32,       // position of the first token
    n_tokens: u32,
    q_stride: u32,    // elements from one token's q to the next's
    out_stride: u32,  // elements from one token's output to the next's
    scale: f32,       // what q is multiplied by before its dot products
    block_first: u32, // first row block of this dispatch (the grid's x is limited)
    key_first: u32,   // the first key position of this pass
    key_end: u32,     // the pass's keys end before this position
    n_heads: u32,     // query heads: a token's rows of `state`
    window: u32,      // keys a row sees, its own included (0: all up to its own)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<KvWord>;
@group(0) @binding(3) var<storage, read> v_cache: array<KvWord>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// (running max, running sum) of each (token, query head) row between passes.
@group(0) @binding(5) var<storage, read_write> state: array<vec2<f32>>;

// The position of row `row`'s token.
fn row_pos(row: u32) -> u32 {
    return params.start + row / params.group;
}

// The first key a row at `pos` sees: 0, or the start of its window.
fn first_key(pos: u32) -> u32 {
    if (params.window == 0u || pos < params.window) {
        return 0u;
    }
    return pos + 1u - params.window;
}

// Where value d of row `row` (of KV head kvh) is in a buffer of `stride` elements per
// token.
fn row_element(row: u32, kvh: u32, d: u32, stride: u32) -> u32 {
    let head = kvh * params.group + row % params.group;
    return (row / params.group) * stride + head * HD + d;
}
// Causal attention for a prompt's tokens on the adapter's matrix units (flash
// attention): the contract of attention/prefill.wgsl (its Params and bindings; the rows
// of KV head kvh are its (token, query head) pairs, token-major; blocks of the latest
// tokens start first; a local layer's row sees its last `window` positions), with the
// keys walked in one pass (the host routes this kernel only where no loop limit asks
// for passes, so key_first is 0 and `state` is not used).
//
// A workgroup of 8 subgroups takes ROWS rows of one KV head, so a GQA group shares
// every K and V tile, and output values [wid.z * SLICE, (wid.z + 1) * SLICE) of them.
// Its rows' q, scaled and as CT, are staged once, and each subgroup keeps its row
// block's in matrices (A operands) for the whole walk; per tile of KT keys:
//   1. the K tile is staged as CT ([key][d], zeros past the keys and the head), and
//      the V tile's loads are issued;
//   2. scores = Q Kᵀ on the matrix units, into `sc` (f32, [key][row]): a subgroup
//      takes its row block's key blocks part % COL_GROUPS, + COL_GROUPS, ...;
//   3. a team of TEAM invocations per row takes its online-softmax step: the tile's
//      max over the keys the row sees, P = exp(score - reference) as CT into `p_s`
//      ([row][key]; 0 for keys it does not see), its running sum; meanwhile the V
//      tile is staged, transposed ([d][key]), and the next K tile's loads issued;
//   4. O += P V on the matrix units, O held in each subgroup's accumulators across
//      the whole walk.
// Matrix accumulators cannot be scaled element by element, so a row's reference is
// set LIFT above its max and moves only when a tile's max passes it by more than
// GROWTH (P then stays below e^GROWTH, inside f16): only then are the accumulators
// rescaled, through workgroup memory, and only in tiles where some row needed it. How
// often that is depends on how far apart a row's scores lie: on an H100 (2026-12-06,
// `bench attention --score-std`, results/prefill/flash_rescale/) scores of standard
// deviation 0.07 / 4 / 8 / 16 took 8B heads 88 / 89 / 226 / 350 µs at 512 tokens with
// a margin of 12 (LIFT + GROWTH), and 88 / 118 / 335 / 355 µs with the former 8. At
// the end each row is divided by its sum.
//
// Subgroup `part` holds output matrices of row block part / COL_GROUPS and the
// OUT_BLOCKS column blocks of column group part % COL_GROUPS. The workgroup has 8
// subgroups of the largest size, so at least 8 of whatever size runs; where more run,
// the parts are computed twice over, and every write through workgroup memory is made
// so that twins write the same values (the rescale reads, waits, then writes).
//
// The host prepends the `f16` and `wgpu_cooperative_matrix` enables and sets S, CT,
// MatA, MatB, MatC, SUBGROUP_MAX, HD, HDP (HD rounded up to S), KV_ROW, ROWS (a
// multiple of S, at most 8 S), KT (a multiple of S), OUT_BLOCKS (1 to 4), TEAM (a
// power of two, at most 4, ROWS * TEAM <= the workgroup), SC_LEN (at least (ROWS + 8) KT
// and 8 S S) and KV_LEN (at least KT (HDP + 8), HDP (KT + 8) and ROWS (HDP + 8)). The
// format includes give k_raw, v_raw and raw_pair.
//
// Every matrix load is of the two kinds the matmuls use: A row-major, B column-major.


const SUBGROUPS: u32 = 8u;
const WG: u32 = SUBGROUPS * SUBGROUP_MAX;
const ROW_BLOCKS: u32 = ROWS / S;
const COL_GROUPS: u32 = SUBGROUPS / ROW_BLOCKS;
const KEY_BLOCKS: u32 = KT / S;
// A row block's q, as matrices of S values of the head.
const Q_BLOCKS: u32 = HDP / S;
const SLICE: u32 = COL_GROUPS * OUT_BLOCKS * S;
const HALF: u32 = HDP / 2u;
// Staged rows are padded by 8 elements so that the rows a matrix load reads start in
// different banks.
const LDQ: u32 = HDP + 8u;
// K is staged [key][d] (rows LDQ apart), V [d][key] (rows LDV apart), P [row][key].
const LDV: u32 = KT + 8u;
const LDP: u32 = KT + 8u;
// The scores are [key][row] with rows LDS apart: 8 past ROWS, so that a softmax team's
// lanes (one row, keys TEAM apart) read distinct banks rather than one.
const LDS: u32 = ROWS + 8u;
const NO_SCORE: f32 = -3.0e38;
// A row's reference is set LIFT above its max, and moves when a tile's max passes it by
// more than GROWTH: P stays within [e^-LIFT, e^GROWTH] of the max at its largest, inside
// f16's normal range (e^-9.7 to e^11.1), and the max may grow by LIFT + GROWTH before
// the accumulators are rescaled.
const LIFT: f32 = 2.0;
const GROWTH: f32 = 10.0;
// Rescales a workgroup takes before it walks the keys still ahead once for each row's
// max (Q Kᵀ alone) and sets each row's reference to it: after that only the next tile
// rescales, by the look-ahead's factors.
// Where scores spread wide, most tiles would (on an H100 a rescaling tile cost about
// seven plain ones: results/prefill/flash_rescale/); where they do not, the walk never
// gets here.
const LOOK_AHEAD: u32 = 2u;

// The rows' q before the walk, then the K or V tile.
var<workgroup> kv_s: array<CT, KV_LEN>;
// The scores of a tile, [key][row]; between tiles and at the end, each subgroup's
// S x S for moving its accumulators through memory.
var<workgroup> sc: array<f32, SC_LEN>;
var<workgroup> p_s: array<CT, ROWS * LDP>;
var<workgroup> factor: array<f32, ROWS>;
var<workgroup> row_sum: array<f32, ROWS>;
// Whether a row's reference grew this tile, in element 0. Every workgroup variable is
// a multiple of 16 bytes: on the H200 a lone 4-byte atomic here broke the matrix loads
// of the arrays (wrong outputs from the first version; right with this padding, the
// only change), as if it left them short of the alignment those loads assume.
var<workgroup> grown: array<atomic<u32>, 4>;

// The K or V tile's pairs this invocation stages: STAGE_N of them, pair i = lid + n WG
// of the tile being key i / HALF's pair i % HALF.
const STAGE_N: u32 = (KT * HALF + WG - 1u) / WG;
alias KvTile = array<KvRaw, STAGE_N>;

// The raw words of this invocation's pairs of keys t0.. of KV head kvh (zeros past
// key_end and the head). They are fetched a phase before put_kv writes them, so that
// the loads' latency passes under that phase's multiplies instead of stalling the
// whole workgroup at a barrier.
fn fetch_kv(t0: u32, key_end: u32, kvh: u32, is_v: bool, lid: u32) -> KvTile {
    var raw: KvTile;
    for (var n = 0u; n < STAGE_N; n++) {
        let i = lid + n * WG;
        let t = i / HALF;
        let p = i % HALF;
        if (i < KT * HALF && t0 + t < key_end && 2u * p < HD) {
            let row = (t0 + t) * params.n_kv_heads + kvh;
            if (is_v) {
                raw[n] = v_raw(row, p);
            } else {
                raw[n] = k_raw(row, p);
            }
        }
    }
    return raw;
}

// A fetched tile as CT into kv_s: K [key][d], V [d][key].
fn put_kv(raw: KvTile, is_v: bool, lid: u32) {
    for (var n = 0u; n < STAGE_N; n++) {
        let i = lid + n * WG;
        if (i < KT * HALF) {
            let t = i / HALF;
            let p = i % HALF;
            let c = vec2<CT>(raw_pair(raw[n], p));
            if (is_v) {
                kv_s[2u * p * LDV + t] = c.x;
                kv_s[(2u * p + 1u) * LDV + t] = c.y;
            } else {
                kv_s[t * LDQ + 2u * p] = c.x;
                kv_s[t * LDQ + 2u * p + 1u] = c.y;
            }
        }
    }
}

// Scores = Q Kᵀ of the K tile in kv_s, into sc ([key][row]): the subgroup takes its row
// block's key blocks part % COL_GROUPS, + COL_GROUPS, ...
fn score_tile(qf: ptr<function, array<MatA, Q_BLOCKS>>, zero: MatC, part: u32, rb: u32) {
    for (var kb = part % COL_GROUPS; kb < KEY_BLOCKS; kb += COL_GROUPS) {
        let sk = kb * S;
        var acc = zero;
        for (var j = 0u; j < Q_BLOCKS; j++) {
            let b = coopLoad<MatB>(&kv_s[sk * LDQ + j * S], LDQ);
            acc = coopMultiplyAdd((*qf)[j], b, acc);
        }
        coopStore(acc, &sc[sk * LDS + rb * S], LDS);
    }
}

// The largest of the scores in sc of keys t0.. in [lo, hi) that this invocation takes
// of its team's row (NO_SCORE for none, or off the teams).
fn seen_max(t0: u32, lo: u32, hi: u32, on_team: bool, in_team: u32, team_row: u32) -> f32 {
    var m = NO_SCORE;
    for (var t = in_team; t < KT; t += TEAM) {
        let key = t0 + t;
        if (on_team && key >= lo && key < hi) {
            m = max(m, sc[t * LDS + team_row]);
        }
    }
    return m;
}

// The max of `v` over this invocation's team, in every lane of it.
fn team_max(v: f32) -> f32 {
    var m = v;
    for (var o = 1u; o < TEAM; o <<= 1u) {
        m = max(m, subgroupShuffleXor(m, o));
    }
    return m;
}

// One accumulator matrix scaled row by row by `factor`, through the subgroup's S x S
// at `mine`: every lane reads its elements before any writes, so twins agree.
fn rescaled(c: MatC, mine: u32, row: u32, lane: u32, lanes: u32) -> MatC {
    coopStore(c, &sc[mine], S);
    workgroupBarrier();
    var kept: array<f32, S * S>;
    var n = 0u;
    for (var e = lane; e < S * S; e += lanes) {
        kept[n] = sc[mine + e] * factor[row + e % S];
        n++;
    }
    workgroupBarrier();
    n = 0u;
    for (var e = lane; e < S * S; e += lanes) {
        sc[mine + e] = kept[n];
        n++;
    }
    workgroupBarrier();
    return coopLoad<MatC>(&sc[mine], S);
}

// One accumulator matrix of rows row.., values d.. of the head, divided by its rows'
// sums into `out`.
fn put_out(c: MatC, mine: u32, r0: u32, row: u32, d: u32, kvh: u32, lane: u32, lanes: u32) {
    workgroupBarrier();
    coopStore(c, &sc[mine], S);
    workgroupBarrier();
    let n_rows = params.n_tokens * params.group;
    for (var e = lane; e < S * S; e += lanes) {
        let r = row + e % S;
        let col = d + e / S;
        if (r0 + r < n_rows && col < HD) {
            out[row_element(r0 + r, kvh, col, params.out_stride)] = sc[mine + e] / row_sum[r];
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) lanes: u32) {
    let kvh = wid.y;
    let n_rows = params.n_tokens * params.group;
    let n_blocks = (n_rows + ROWS - 1u) / ROWS;
    let r0 = (n_blocks - 1u - (params.block_first + wid.x)) * ROWS;
    let rows = min(ROWS, n_rows - r0);
    let last_pos = params.start + (r0 + rows - 1u) / params.group;
    let key_end = min(last_pos + 1u, params.key_end);

    let part = sg % SUBGROUPS;
    let rb = part / COL_GROUPS;
    let d0 = wid.z * SLICE + (part % COL_GROUPS) * OUT_BLOCKS * S;
    let mine = part * S * S;

    // This invocation's row of the softmax teams, and its place in the team: teams are
    // runs of TEAM lanes of one subgroup.
    let li = sg * lanes + lane;
    let team_row = li / TEAM;
    let in_team = li % TEAM;
    let on_team = team_row < rows;
    let my_pos = row_pos(r0 + min(team_row, ROWS - 1u));
    let my_first = first_key(my_pos);
    var reference = NO_SCORE;
    var sum = 0.0;

    for (var i = lid; i < ROWS * HALF; i += WG) {
        let r = i / HALF;
        let p = i % HALF;
        var v = vec2<f32>(0.0);
        if (r < rows && 2u * p < HD) {
            let j = row_element(r0 + r, kvh, 2u * p, params.q_stride);
            v = vec2<f32>(q[j], q[j + 1u]) * params.scale;
        }
        let c = vec2<CT>(v);
        kv_s[r * LDQ + 2u * p] = c.x;
        kv_s[r * LDQ + 2u * p + 1u] = c.y;
    }
    for (var i = lid; i < SC_LEN; i += WG) {
        sc[i] = 0.0;
    }
    workgroupBarrier();
    // Zero accumulators come from memory: a matrix has no zero constructor.
    var zero = coopLoad<MatC>(&sc[0], S);
    // The subgroup's row block of q stays in its matrices for the whole walk (the
    // loop's first barrier keeps the K tile from overwriting it before all are read).
    var qf: array<MatA, Q_BLOCKS>;
    for (var j = 0u; j < Q_BLOCKS; j++) {
        qf[j] = coopLoadT<MatA>(&kv_s[rb * S * LDQ + j * S], LDQ);
    }
    var o0 = zero;
    var o1 = zero;
    var o2 = zero;
    var o3 = zero;
    // Column blocks past the head multiply a block inside it and are never stored.
    let b0 = min(d0, HDP - S);
    let b1 = min(d0 + S, HDP - S);
    let b2 = min(d0 + 2u * S, HDP - S);
    let b3 = min(d0 + 3u * S, HDP - S);

    let key_start = first_key(row_pos(r0));
    var k_next = fetch_kv(key_start, key_end, kvh, false, lid);
    var rescales = 0u;
    // This row's factor from the look-ahead, applied to the accumulators with the next
    // tile's own (the look-ahead only runs where a next tile follows).
    var ahead_factor = 1.0;
    for (var t0 = key_start; t0 < key_end; t0 += KT) {
        workgroupBarrier();
        // Every tile starts with no row grown (the flag is read after this tile's
        // softmax, behind two barriers).
        if (lid == 0u) {
            atomicStore(&grown[0], 0u);
        }
        put_kv(k_next, false, lid);
        // V's loads are in flight during Q Kᵀ and the softmax.
        let v_tile = fetch_kv(t0, key_end, kvh, true, lid);
        workgroupBarrier();
        score_tile(&qf, zero, part, rb);
        workgroupBarrier();

        // The keys of this tile the row sees: from its window's first to its own.
        let seen_lo = max(my_first, t0);
        let seen_hi = min(my_pos + 1u, key_end);
        let tile_max = team_max(seen_max(t0, seen_lo, seen_hi, on_team, in_team, team_row));
        // A row is fresh until its first key or the look-ahead gives it a reference.
        let fresh = reference == NO_SCORE;
        let grow = !fresh && tile_max > reference + GROWTH;
        let next = select(reference, tile_max + LIFT, grow || fresh);
        let f = select(1.0, exp(reference - next), grow);
        var tile_sum = 0.0;
        for (var t = in_team; t < KT; t += TEAM) {
            let key = t0 + t;
            var e = CT(0.0);
            if (on_team && key >= seen_lo && key < seen_hi) {
                e = CT(exp(sc[t * LDS + team_row] - next));
            }
            if (team_row < ROWS) {
                p_s[team_row * LDP + t] = e;
            }
            tile_sum += f32(e);
        }
        for (var o = 1u; o < TEAM; o <<= 1u) {
            tile_sum += subgroupShuffleXor(tile_sum, o);
        }
        sum = sum * f + tile_sum;
        reference = next;
        if (in_team == 0u && team_row < ROWS) {
            factor[team_row] = f * ahead_factor;
        }
        if (on_team && (grow || ahead_factor != 1.0)) {
            atomicOr(&grown[0], 1u);
        }
        ahead_factor = 1.0;
        put_kv(v_tile, true, lid);
        // The next tile's K loads are in flight during P V.
        k_next = fetch_kv(t0 + KT, key_end, kvh, false, lid);
        let grew = workgroupUniformLoad(&grown[0]) != 0u;
        rescales += select(0u, 1u, grew);
        if (grew) {
            o0 = rescaled(o0, mine, rb * S, lane, lanes);
            if (OUT_BLOCKS > 1u) {
                o1 = rescaled(o1, mine, rb * S, lane, lanes);
            }
            if (OUT_BLOCKS > 2u) {
                o2 = rescaled(o2, mine, rb * S, lane, lanes);
            }
            if (OUT_BLOCKS > 3u) {
                o3 = rescaled(o3, mine, rb * S, lane, lanes);
            }
        }
        workgroupBarrier();

        for (var kk = 0u; kk < KT; kk += S) {
            let a = coopLoadT<MatA>(&p_s[rb * S * LDP + kk], LDP);
            o0 = coopMultiplyAdd(a, coopLoad<MatB>(&kv_s[b0 * LDV + kk], LDV), o0);
            if (OUT_BLOCKS > 1u) {
                o1 = coopMultiplyAdd(a, coopLoad<MatB>(&kv_s[b1 * LDV + kk], LDV), o1);
            }
            if (OUT_BLOCKS > 2u) {
                o2 = coopMultiplyAdd(a, coopLoad<MatB>(&kv_s[b2 * LDV + kk], LDV), o2);
            }
            if (OUT_BLOCKS > 3u) {
                o3 = coopMultiplyAdd(a, coopLoad<MatB>(&kv_s[b3 * LDV + kk], LDV), o3);
            }
        }

        // Decided by one invocation and read back uniformly: a matrix load must be in
        // control flow the compiler can prove uniform.
        if (lid == 0u) {
            atomicStore(&grown[1], select(0u, 1u, rescales == LOOK_AHEAD && t0 + KT < key_end));
        }
        if (workgroupUniformLoad(&grown[1]) != 0u) {
            rescales++;
            // The max of each row's scores over the keys after this tile, by the same
            // Q Kᵀ as the walk's (so no later tile's max passes it), through kv_s and
            // sc, which the walk's next tile stages anew; k_next waits in registers.
            var ahead = NO_SCORE;
            var k_ahead = fetch_kv(t0 + KT, key_end, kvh, false, lid);
            for (var u0 = t0 + KT; u0 < key_end; u0 += KT) {
                workgroupBarrier();
                put_kv(k_ahead, false, lid);
                k_ahead = fetch_kv(u0 + KT, key_end, kvh, false, lid);
                workgroupBarrier();
                score_tile(&qf, zero, part, rb);
                workgroupBarrier();
                let lo = max(my_first, u0);
                let hi = min(my_pos + 1u, key_end);
                ahead = max(ahead, seen_max(u0, lo, hi, on_team, in_team, team_row));
            }
            ahead = team_max(ahead);
            // Rows whose max ahead passes the margin take it as their reference (fresh
            // rows too: their sums are zero, so are their accumulators). Their
            // accumulators are rescaled with the next tile's.
            let lifted = on_team && ahead > reference + GROWTH;
            let had_keys = sum != 0.0;
            ahead_factor = select(1.0, exp(reference - ahead), lifted && had_keys);
            sum = sum * ahead_factor;
            reference = select(reference, ahead, lifted);
        }
    }

    if (in_team == 0u && team_row < ROWS) {
        row_sum[team_row] = sum;
    }
    put_out(o0, mine, r0, rb * S, d0, kvh, lane, lanes);
    if (OUT_BLOCKS > 1u) {
        put_out(o1, mine, r0, rb * S, d0 + S, kvh, lane, lanes);
    }
    if (OUT_BLOCKS > 2u) {
        put_out(o2, mine, r0, rb * S, d0 + 2u * S, kvh, lane, lanes);
    }
    if (OUT_BLOCKS > 3u) {
        put_out(o3, mine, r0, rb * S, d0 + 3u * S, kvh, lane, lanes);
    }
}

// attention/flash over an f16 KV cache.
