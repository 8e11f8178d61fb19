//! naga's translations of WGSL: parsed, validated and its override constants resolved,
//! then written as SPIR-V (the passthrough path on Vulkan, and `spirv/`, the kernels'
//! translations checked in, from `kernels::spirv::catalog`) or Metal Shading Language
//! (checked by a test).

use crate::{Error, Result};

/// Parses and validates `wgsl`, then resolves its override constants (defaults where
/// `constants` gives none), as the backends need.
fn resolved(
    name: &str,
    wgsl: &str,
    entry: &str,
    constants: &[(&str, f64)],
) -> Result<(naga::Module, naga::valid::ModuleInfo)> {
    let shader_error = |what: String| Error::Shader {
        name: name.to_string(),
        what,
    };
    let module =
        naga::front::wgsl::parse_str(wgsl).map_err(|e| shader_error(e.emit_to_string(wgsl)))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| shader_error(e.emit_to_string(wgsl)))?;
    let constants: naga::back::PipelineConstants =
        constants.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, entry)),
        &constants,
    )
    .map_err(|e| shader_error(e.to_string()))?;
    Ok((module.into_owned(), info.into_owned()))
}

/// SPIR-V for the compute entry point `entry`, with override constants resolved.
///
/// Bounds checks are left to the device: wgpu enables Vulkan's robustBufferAccess,
/// which keeps out-of-range reads inside the binding.
pub fn wgsl_to_spirv(
    name: &str,
    wgsl: &str,
    entry: &str,
    constants: &[(&str, f64)],
) -> Result<Vec<u32>> {
    spirv_and_workgroup_size(name, wgsl, entry, constants).map(|(words, _)| words)
}

/// SPIR-V as in `wgsl_to_spirv`, and the entry point's workgroup size, which a
/// passthrough shader module must declare.
pub fn spirv_and_workgroup_size(
    name: &str,
    wgsl: &str,
    entry: &str,
    constants: &[(&str, f64)],
) -> Result<(Vec<u32>, [u32; 3])> {
    let (module, info) = resolved(name, wgsl, entry, constants)?;
    let size = module
        .entry_points
        .iter()
        .find(|e| e.name == entry)
        .map(|e| e.workgroup_size)
        .ok_or_else(|| Error::Shader {
            name: name.to_string(),
            what: format!("no entry point `{entry}`"),
        })?;
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        // Explicit flags: naga's default adds debug info in debug builds, which would
        // make spirv/ depend on the profile that generated it.
        flags: naga::back::spv::WriterFlags::LABEL_VARYINGS,
        // wgpu rejects modules that use 16-bit storage for inputs and outputs.
        use_storage_input_output_16: false,
        // As wgpu's own path is configured (PipelineDesc): kernels write all the
        // workgroup memory they read, so zeroing it is pure cost.
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        ..Default::default()
    };
    Ok((write_spirv(name, &module, &info, entry, &options)?, size))
}

/// SPIR-V for `entry` written with `options` of the caller's choosing (bounds checks,
/// loop bounding, version), overrides resolved as in [`wgsl_to_spirv`]: for tools that
/// compare what drivers make of other translations of the same WGSL.
pub fn wgsl_to_spirv_with(
    name: &str,
    wgsl: &str,
    entry: &str,
    constants: &[(&str, f64)],
    options: &naga::back::spv::Options,
) -> Result<Vec<u32>> {
    let (module, info) = resolved(name, wgsl, entry, constants)?;
    write_spirv(name, &module, &info, entry, options)
}

fn write_spirv(
    name: &str,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    options: &naga::back::spv::Options,
) -> Result<Vec<u32>> {
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_string(),
    };
    naga::back::spv::write_vec(module, info, options, Some(&pipeline)).map_err(|e| Error::Shader {
        name: name.to_string(),
        what: e.to_string(),
    })
}

/// Metal Shading Language for the compute entry point `entry`.
pub fn wgsl_to_msl(name: &str, wgsl: &str, entry: &str) -> Result<String> {
    let (module, info) = resolved(name, wgsl, entry, &[])?;
    let options = naga::back::msl::Options {
        lang_version: (2, 4),
        fake_missing_bindings: true,
        ..Default::default()
    };
    let pipeline = naga::back::msl::PipelineOptions {
        entry_point: Some((naga::ShaderStage::Compute, entry.to_string())),
        ..Default::default()
    };
    naga::back::msl::write_string(&module, &info, &options, &pipeline)
        .map(|(text, _)| text)
        .map_err(|e| Error::Shader {
            name: name.to_string(),
            what: e.to_string(),
        })
}
