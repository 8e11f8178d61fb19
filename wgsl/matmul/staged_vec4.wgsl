// The matrix-unit drivers' staging (coop_staging.wgsl) where a matrix load may read
// through a pointer to vectors of its elements (SPIR-V): four values a store. The
// staging is what bounds these kernels' rounds, and a scalar store per value was most
// of its instructions. The includer declares `staged` as array<Staged> and divides its
// matrix loads' offsets and row strides, which count values, by STAGED_VALUES.

alias Staged = vec4<CT>;
const STAGED_VALUES: u32 = 4u;

// Four values as CT at values at..at + 4 (at a multiple of 4).
fn put4(at: u32, v: vec4<f32>) {
    staged[at / 4u] = vec4<CT>(v);
}
