#include "ops/q8_round.wgsl"

// The norms' q8 variants (ops/rms_norm_q8, ops/add_rms_norm_q8): besides `out`, they
// write it quantized as the dot4 matvecs take x (matvec/q8_x.wgsl: per group of 32 the
// int8 words, then the group's tail: its scale and sums), so that every matvec reading
// the norm's output reads it in place or copies it, instead of each workgroup
// quantizing it again. The host sets Q8_BINDING, out_q8's binding, after the op's
// others.
//
// The norm is one workgroup, so latency is what counts: invocation lid takes the four
// elements of every chunk c = lid, lid + WG, ... (rather than rms_scale's stride), so
// that the eight invocations holding a group quantize it together (ops/q8_round.wgsl).
// (One invocation per group, reading it back from `out`, cost SmolLM2 8 % of its decode
// speed on the H200.)

@group(0) @binding(Q8_BINDING) var<storage, read_write> out_q8: array<u32>;

// out's four elements from element e (zeros past the end), x * scale * w.
fn normed4(e: u32, scale: f32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (e + j < params.n) {
            v[j] = x[at(e + j)] * scale * w[e + j];
        }
    }
    return v;
}

fn write_out(lid: u32, scale: f32) {
    // x as other invocations wrote it (add_rms_norm).
    storageBarrier();
    let chunks = (params.n + 3u) / 4u;
    let groups = (params.n + 31u) / 32u;
    // Whole rounds of WG chunks, so that every invocation reaches the barriers.
    for (var c0 = 0u; c0 < chunks; c0 += WG) {
        let c = c0 + lid;
        let v = normed4(4u * c, scale);
        for (var j = 0u; j < 4u; j++) {
            if (4u * c + j < params.n) {
                out[at(4u * c + j)] = v[j];
            }
        }
        // The rows' groups lie end to end as their elements do.
        q8_round(lid, row * groups + c / 8u, c / 8u < groups, v);
    }
}
