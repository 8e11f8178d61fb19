//! Regenerates `spirv/`: naga's SPIR-V for every kernel, as `<kernel>.spv`, beside the
//! composed WGSL it was made from, as `<kernel>.wgsl`.
//!
//! cargo run --example spirv
//!
//! `tests/spirv.rs` fails when a checked-in file differs from what naga emits now.

use std::path::Path;

use brass::device::translate::wgsl_to_spirv;
use brass::kernels::spirv::catalog;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("spirv");
    for (name, wgsl) in catalog() {
        let words = wgsl_to_spirv(&name, &wgsl, "main", &[]).unwrap_or_else(|e| panic!("{e}"));
        let path = root.join(format!("{name}.spv"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytemuck::cast_slice::<u32, u8>(&words)).unwrap();
        std::fs::write(path.with_extension("wgsl"), &wgsl).unwrap();
        println!("{} ({} words)", path.display(), words.len());
    }
}
