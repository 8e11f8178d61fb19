// The norms' q8 variants (ops/rms_norm_q8, ops/add_rms_norm_q8): besides `out`, they
// write it quantized as the dot4 matvecs stage x (matvec/q8_x.wgsl), so that every
// matvec reading the norm's output copies it instead of each workgroup quantizing it
// again. The host puts out_q8's binding after the op's others.

@group(0) @binding(Q8_BINDING) var<storage, read_write> out_q8: array<vec4<f32>>;

fn out_at(i: u32) -> f32 {
    if (i < params.n) {
        return out[i];
    }
    return 0.0;
}

fn write_out(lid: u32, scale: f32) {
    write_scaled(lid, scale);
    // Each group reads `out` as other invocations wrote it.
    storageBarrier();
    for (var g = lid; g < (params.n + 31u) / 32u; g += WG) {
        let i = 32u * g;
        var v: array<vec4<f32>, 8>;
        for (var j = 0u; j < 8u; j++) {
            let e = i + 4u * j;
            v[j] = vec4<f32>(out_at(e), out_at(e + 1u), out_at(e + 2u), out_at(e + 3u));
        }
        let q = q8_group(v);
        out_q8[3u * g] = bitcast<vec4<f32>>(q.lo);
        out_q8[3u * g + 1u] = bitcast<vec4<f32>>(q.hi);
        out_q8[3u * g + 2u] = q.tail;
    }
}
