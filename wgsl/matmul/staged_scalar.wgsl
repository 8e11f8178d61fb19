// The matrix-unit drivers' staging (coop_staging.wgsl) where matrix loads take scalar
// pointers (the MSL naga writes for Metal): a store per value. As staged_vec4.wgsl,
// whose contract this keeps: `staged` is array<Staged>, offsets count values.

alias Staged = CT;
const STAGED_VALUES: u32 = 1u;

// Four values as CT at values at..at + 4.
fn put4(at: u32, v: vec4<f32>) {
    let c = vec4<CT>(v);
    staged[at] = c.x;
    staged[at + 1u] = c.y;
    staged[at + 2u] = c.z;
    staged[at + 3u] = c.w;
}
