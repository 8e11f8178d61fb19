//! The catalog of every kernel brass ships, for the tools and tests that translate them
//! all ([`crate::device::translate`]): SPIR-V checked in under `spirv/`, Metal Shading
//! Language checked by a test.
//!
//! naga preserves semantics, not access patterns, so the SPIR-V is kept where a
//! reviewer can diff what the driver is really given.
//! Regenerate `spirv/` with: `cargo run --example spirv`.

/// Every kernel brass ships, as (file stem under `spirv/`, complete WGSL). Coop
/// matvecs are given in one canonical configuration: 256 invocations, a 4,096-element
/// tile, x staged as f16 (the H200's route for K = 4,096); the dot4 kernels that can
/// load a slice ahead also with that path (`<name>_prefetch`) and with x in place, 8
/// columns at once (`<name>_columns8`).
///
/// Panics if a kernel does not compose, which its tests rule out.
pub fn catalog() -> Vec<(String, String)> {
    use super::matvec::{MatvecLaunch, MATVEC_KERNELS};
    let source = |launch: MatvecLaunch| launch.source().unwrap_or_else(|e| panic!("{e}"));
    let mut out: Vec<(String, String)> = MATVEC_KERNELS
        .iter()
        .map(|k| {
            (
                k.name.to_string(),
                source(MatvecLaunch::canonical(k, false)),
            )
        })
        .collect();
    for k in MATVEC_KERNELS.iter().filter(|k| k.splits_slices()) {
        let wgsl = source(MatvecLaunch::canonical(k, true));
        out.push((format!("{}_prefetch", k.name), wgsl));
        let wgsl = source(MatvecLaunch::canonical_columns_at_once(k, 8));
        out.push((format!("{}_columns8", k.name), wgsl));
    }
    for (name, wgsl) in crate::device::probe_sources() {
        out.push((name.to_string(), wgsl.to_string()));
    }
    // The matrix probe in the shapes the coop matmuls are given in.
    for size in [16, 8] {
        let shape = crate::device::CoopMatrix::f16_as_offered(size);
        let wgsl = crate::device::coop_probe_source(shape).unwrap_or_else(|e| panic!("{e}"));
        out.push((format!("probe/coop_peak_{size}x{size}"), wgsl));
    }
    for (name, wgsl) in super::ops::sources() {
        out.push((name.to_string(), wgsl.to_string()));
    }
    out.extend(super::attention::sources().unwrap_or_else(|e| panic!("{e}")));
    out.extend(super::matmul::sources().unwrap_or_else(|e| panic!("{e}")));
    out
}
