// The norms' q8 variants (ops/rms_norm_q8, ops/add_rms_norm_q8): besides `out`, they
// write it quantized as the dot4 matvecs take x (matvec/q8_x.wgsl: per group of 32 the
// int8 words, then the group's tail: its scale and sums), so that every matvec reading
// the norm's output reads it in place or copies it, instead of each workgroup
// quantizing it again. The host puts out_q8's binding after the op's others.
//
// The norm is one workgroup, so latency is what counts: invocation lid takes the four
// elements of every chunk c = lid, lid + WG, ... (rather than rms_scale's stride), so
// that the eight invocations holding a group meet once in workgroup memory for its
// amax, then each packs its own four values. (One invocation per group, reading it back
// from `out`, cost SmolLM2 8 % of its decode speed on the H200.) The sums of a group's
// int8 values meet at the round's closing barrier, which is there anyway, and its first
// invocation writes the tail after it.

@group(0) @binding(Q8_BINDING) var<storage, read_write> out_q8: array<u32>;
// Each invocation's sum of its four int8 values.
var<workgroup> q8_sums: array<i32, WG>;

// out's four elements from element e (zeros past the end), x * scale * w.
fn normed4(e: u32, scale: f32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (e + j < params.n) {
            v[j] = x[e + j] * scale * w[e + j];
        }
    }
    return v;
}

fn write_out(lid: u32, scale: f32) {
    // x as other invocations wrote it (add_rms_norm), and everyone past reading
    // rms_scale's result out of `partial`, which is reused below.
    storageBarrier();
    let p = lid % 8u;
    let first = lid - p;
    let chunks = (params.n + 3u) / 4u;
    let groups = (params.n + 31u) / 32u;
    // Whole rounds of WG chunks, so that every invocation reaches the barriers.
    for (var c0 = 0u; c0 < chunks; c0 += WG) {
        let c = c0 + lid;
        let v = normed4(4u * c, scale);
        for (var j = 0u; j < 4u; j++) {
            if (4u * c + j < params.n) {
                out[4u * c + j] = v[j];
            }
        }
        let a = abs(v);
        partial[lid] = max(max(a.x, a.y), max(a.z, a.w));
        workgroupBarrier();
        var amax = 0.0;
        for (var j = 0u; j < 8u; j++) {
            amax = max(amax, partial[first + j]);
        }
        let g = c / 8u;
        let packed = pack4x8snorm(v * q8_inv(amax));
        q8_sums[lid] = dot4I8Packed(packed, 0x01010101u);
        if (g < groups) {
            out_q8[12u * g + p] = packed;
        }
        // Also closes the round: the next one writes `partial` first and q8_sums only
        // after its first barrier, so the reads below are safe without another.
        workgroupBarrier();
        if (g < groups && p == 0u) {
            let s_lo = q8_sums[first] + q8_sums[first + 1u] + q8_sums[first + 2u]
                     + q8_sums[first + 3u];
            let s_hi = q8_sums[first + 4u] + q8_sums[first + 5u] + q8_sums[first + 6u]
                     + q8_sums[first + 7u];
            let tail = q8_tail_of(amax / 127.0, s_lo, s_hi);
            for (var j = 0u; j < 4u; j++) {
                out_q8[12u * g + 8u + j] = bitcast<u32>(tail[j]);
            }
        }
    }
}
