//! spirv/ is what naga emits for every kernel today, beside the composed WGSL it came
//! from (stale = failure), and every kernel also translates to Metal Shading Language.

use brass::device::translate::{wgsl_to_msl, wgsl_to_spirv};
use brass::kernels::spirv::catalog;

#[test]
fn checked_in_spirv_is_current() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("spirv");
    let mut stale = Vec::new();
    for (name, wgsl) in catalog() {
        let words = wgsl_to_spirv(&name, &wgsl, "main", &[]).unwrap();
        let on_disk = std::fs::read(root.join(format!("{name}.spv"))).unwrap_or_default();
        let wgsl_on_disk = std::fs::read_to_string(root.join(format!("{name}.wgsl")));
        if on_disk != bytemuck::cast_slice::<u32, u8>(&words)
            || wgsl_on_disk.ok().as_deref() != Some(wgsl.as_str())
        {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "stale or missing under spirv/ (run `cargo run --example spirv`): {stale:?}"
    );
}

#[test]
fn every_kernel_translates_to_msl() {
    // Metal's simdgroup matrices are 8x8: the 16x16 cooperative-matrix kernels are
    // Vulkan's (NVIDIA's tensor cores) and have no Metal form.
    for (name, wgsl) in catalog()
        .into_iter()
        .filter(|(n, _)| !n.ends_with("_16x16"))
    {
        let msl = wgsl_to_msl(&name, &wgsl, "main").unwrap_or_else(|e| panic!("{e}"));
        assert!(msl.contains("kernel void"), "{name}");
        if name.ends_with("_8x8") {
            assert!(msl.contains("simdgroup_multiply_accumulate"), "{name}");
        }
    }
}
