// Split-K decode attention without subgroups, for devices that have none: the same
// chunks, head groups, outputs and combine as `attention/decode.wgsl`.
//
// Positions go in tiles of TILE: the scores of a tile (query heads x positions) sit in
// workgroup memory, one invocation per query head folds them into its running max and
// sum (an online softmax), and the accumulators (query head x value pairs, ACC per
// invocation) are rescaled by exp(m_old - m_new) before the tile's weighted V rows are
// added.
//
// The host sets WG (invocations), TILE, HD (head_dim), G (query heads per workgroup;
// G <= WG), ACC (G * HD / 2 over WG, rounded up) and KV_ROW. The format includes give
// KvWord, k_pair and v_pair; the bindings are `attention/decode_io.wgsl`'s, a pair
// per element.

alias QRead = vec2<f32>;
alias KvRead = KvWord;
alias OutWord = vec2<f32>;
alias PartMl = vec2<f32>;
alias PartAcc = vec2<f32>;


var<workgroup> scores: array<f32, G * TILE>;
var<workgroup> run_max: array<f32, G>;
var<workgroup> run_sum: array<f32, G>;
var<workgroup> rescale: array<f32, G>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
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

    var acc: array<vec2<f32>, ACC>;
    for (var j = 0u; j < ACC; j++) {
        acc[j] = vec2<f32>(0.0);
    }
    if (lid < heads) {
        run_max[lid] = -3.0e38;
        run_sum[lid] = 0.0;
    }
    workgroupBarrier();

    for (var t0 = p0; t0 < p1; t0 += TILE) {
        let nt = min(TILE, p1 - t0);
        // One (head, position) dot product per invocation.
        for (var i = lid; i < heads * nt; i += WG) {
            let g = i / nt;
            let t = i % nt;
            let q_base = (pl.r * params.q_stride) / 2u + (h0 + g) * HALF;
            let row = (t0 + t) * params.n_kv_heads + kvh;
            var s = 0.0;
            for (var p = 0u; p < HALF; p++) {
                s += dot(q[q_base + p], k_pair(row, p));
            }
            scores[g * TILE + t] = s * params.scale;
        }
        workgroupBarrier();
        if (lid < heads) {
            let row = lid * TILE;
            var m = run_max[lid];
            for (var t = 0u; t < nt; t++) {
                m = max(m, scores[row + t]);
            }
            let r = exp(run_max[lid] - m);
            var tile_sum = 0.0;
            for (var t = 0u; t < nt; t++) {
                let e = exp(scores[row + t] - m);
                scores[row + t] = e;
                tile_sum += e;
            }
            run_sum[lid] = run_sum[lid] * r + tile_sum;
            run_max[lid] = m;
            rescale[lid] = r;
        }
        workgroupBarrier();
        // Invocation lid owns (head, pair) lid, lid + WG, ...
        for (var j = 0u; j < ACC; j++) {
            let i = lid + j * WG;
            if (i < heads * HALF) {
                let g = i / HALF;
                let p = i % HALF;
                var a = acc[j] * rescale[g];
                for (var t = 0u; t < nt; t++) {
                    a += scores[g * TILE + t] * v_pair((t0 + t) * params.n_kv_heads + kvh, p);
                }
                acc[j] = a;
            }
        }
        workgroupBarrier();
    }

    let one_chunk = row.n_chunks == 1u;
    let out_at = (pl.r * params.out_stride) / 2u;
    for (var j = 0u; j < ACC; j++) {
        let i = lid + j * WG;
        if (i < heads * HALF) {
            let g = i / HALF;
            let h = h0 + g;
            let p = i % HALF;
            if (one_chunk) {
                out[out_at + h * HALF + p] = acc[j] / run_sum[g];
            } else {
                part_acc[((row_heads + h) * params.part_stride + c) * HALF + p] = acc[j];
            }
        }
    }
    if (!one_chunk && lid < heads) {
        part_ml[(row_heads + h0 + lid) * params.part_stride + c] = vec2<f32>(run_max[lid], run_sum[lid]);
    }
}
