const WG: u32 = 256u;
const TILE: u32 = 64u;
const HEADS_MAX: u32 = 16u;
const ACC: u32 = 8u;

// Split-K decode attention (flash-decoding), first pass: workgroup (c, kvh, hg) takes
// the positions of chunk c, every query head of head group hg that reads kv head kvh,
// and leaves per query head its running max m, its sum l of exp(s - m) and the
// unnormalized sum acc = sum_t exp(s_t - m) v_t; `attention_combine.wgsl` merges the
// chunks. Each K and V byte of a chunk is read by one workgroup, whatever the GQA
// ratio, and the chunks spread a long context over the whole GPU.
//
// Positions go in tiles of TILE: the scores of a tile (query heads x positions) sit in
// workgroup memory, one invocation per query head folds them into its running max and
// sum (an online softmax), and the accumulators (query head x dimension pairs, ACC per
// invocation at most) are rescaled by exp(m_old - m_new) before the tile's weighted V
// rows are added. No subgroups: portable to every device.
//
// The host supplies WG (invocations), TILE (positions per tile), HEADS_MAX (query heads
// per workgroup at most) and ACC (accumulators per invocation; HEADS_MAX * head_dim <=
// WG * ACC).

struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    n_pos: u32,       // positions in the cache, this one included
    chunk: u32,       // positions per chunk (the last may be shorter)
    n_chunks: u32,
    heads_per_group: u32,  // query heads per workgroup (z index hg)
    scale: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<f32>;
@group(0) @binding(3) var<storage, read> v_cache: array<f32>;
// Per query head h and chunk c, at h * n_chunks + c: (m, l).
@group(0) @binding(4) var<storage, read_write> part_ml: array<vec2<f32>>;
// Per query head h and chunk c, head_dim floats at (h * n_chunks + c) * head_dim.
@group(0) @binding(5) var<storage, read_write> part_acc: array<f32>;

var<workgroup> scores: array<f32, HEADS_MAX * TILE>;
var<workgroup> run_max: array<f32, HEADS_MAX>;
var<workgroup> rescale: array<f32, HEADS_MAX>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let hd = params.head_dim;
    let group = params.n_heads / params.n_kv_heads;
    let kvh = wid.y;
    let g0 = wid.z * params.heads_per_group;
    let hg = min(params.heads_per_group, group - g0);
    // Query head of local head g: kvh * group + g0 + g.
    let h0 = kvh * group + g0;
    let kv_dim = params.n_kv_heads * hd;
    let kv_base = kvh * hd;
    let c = wid.x;
    let p0 = c * params.chunk;
    let p1 = min(p0 + params.chunk, params.n_pos);

    var acc: array<f32, ACC>;
    for (var j = 0u; j < ACC; j++) {
        acc[j] = 0.0;
    }
    // Invocation lid < hg keeps head lid's running sum; run_max is shared.
    var sum = 0.0;
    if (lid < hg) {
        run_max[lid] = -3.4e38;
    }
    workgroupBarrier();

    for (var t0 = p0; t0 < p1; t0 += TILE) {
        let nt = min(TILE, p1 - t0);
        // Scores of the tile: one (head, position) dot product per invocation; the
        // positions of a head are consecutive, so a K row is read by neighbours.
        for (var i = lid; i < hg * nt; i += WG) {
            let g = i / nt;
            let t = i % nt;
            let q_base = (h0 + g) * hd;
            let k_base = (t0 + t) * kv_dim + kv_base;
            var s0 = 0.0;
            var s1 = 0.0;
            var d = 0u;
            for (; d + 1u < hd; d += 2u) {
                s0 += q[q_base + d] * k_cache[k_base + d];
                s1 += q[q_base + d + 1u] * k_cache[k_base + d + 1u];
            }
            if (d < hd) {
                s0 += q[q_base + d] * k_cache[k_base + d];
            }
            scores[g * TILE + t] = (s0 + s1) * params.scale;
        }
        workgroupBarrier();
        // The online softmax, one invocation per query head.
        if (lid < hg) {
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
            sum = sum * r + tile_sum;
            run_max[lid] = m;
            rescale[lid] = r;
        }
        workgroupBarrier();
        // The weighted V rows: invocation lid owns pairs lid, lid + WG, ... of
        // (head, dimension); neighbours read neighbouring dimensions of a V row.
        for (var j = 0u; j < ACC; j++) {
            let i = lid + j * WG;
            if (i < hg * hd) {
                let g = i / hd;
                let d = i % hd;
                let row = g * TILE;
                var a = acc[j] * rescale[g];
                for (var t = 0u; t < nt; t++) {
                    a += scores[row + t] * v_cache[(t0 + t) * kv_dim + kv_base + d];
                }
                acc[j] = a;
            }
        }
        workgroupBarrier();
    }

    if (lid < hg) {
        part_ml[(h0 + lid) * params.n_chunks + c] = vec2<f32>(run_max[lid], sum);
    }
    for (var j = 0u; j < ACC; j++) {
        let i = lid + j * WG;
        if (i < hg * hd) {
            let g = i / hd;
            let d = i % hd;
            part_acc[((h0 + g) * params.n_chunks + c) * hd + d] = acc[j];
        }
    }
}
