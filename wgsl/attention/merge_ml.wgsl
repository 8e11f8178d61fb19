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
