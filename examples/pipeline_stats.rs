//! What the Vulkan driver's compiler made of a matvec route: its statistics (registers,
//! spills, instructions, as the driver names them) through VK_KHR_pipeline_executable_properties.
//!
//! The same WGSL reaches drivers as different SPIR-V (wgpu's translation clamps indices
//! and bounds every loop; passthrough does neither), and on the H200 that alone moved
//! the K-quant heads by up to 17 points (results/compiler_sensitivity). This shows what
//! changed in the compiled kernel.
//!
//!   cargo run --release --example pipeline_stats -- --types q4_k,q6_k --m 128256 --k 4096 \
//!       [--x-q8] [--columns N] [--flavours wgpu,no-loop,no-bounds,none] [--adapter INDEX|NAME]
//!       [--attention llama3-8b,smollm2 [--kv f16]] [--matmul [--decode-tiles 2:1:4,4:2:4:4]]
//!
//! With `--attention`, the routed decode attention kernel of those synthetic presets'
//! heads and the combine pass come first.
//!
//! Routes come from brass's router on the adapter's profile, as the bench's do; the
//! SPIR-V is naga's, written with the options wgpu 30's Vulkan backend uses (`wgpu`) or
//! with its checks taken off.

use std::ffi::CStr;

use ash::vk;
use brass::device::{AdapterChoice, Device, WgpuDevice};
use brass::gguf::synthetic::SyntheticSpec;
use brass::kernels::attention::{self, KvType};
use brass::kernels::matmul::{MatmulEngine, MatmulLaunch};
use brass::kernels::matvec::Family;
use brass::quant::GgmlType;
use brass::router::{
    route_attention, route_matmul_engine, route_matvec, AttentionQuery, Force, MatvecQuery,
    Overrides, XInput,
};
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, value_delimiter = ',', default_value = "q4_k,q5_k,q6_k")]
    types: Vec<String>,
    #[arg(long, default_value_t = 128_256)]
    m: u64,
    #[arg(long, default_value_t = 4096)]
    k: u64,
    /// Routes on x already quantized (the model's path for heads).
    #[arg(long)]
    x_q8: bool,
    /// Routes for a model whose decode steps take up to this many rows (the staged
    /// columns of router clause 7 where more than one).
    #[arg(long, default_value_t = 1)]
    columns: u64,
    /// Family to force (default: the routed one).
    #[arg(long)]
    family: Option<String>,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wgpu,no-loop,no-bounds,none"
    )]
    flavours: Vec<String>,
    /// Adapter: an index (as examples/devices lists them) or a name substring.
    #[arg(long)]
    adapter: Option<String>,
    /// Synthetic presets (or prefixes) whose decode attention to show.
    #[arg(long, value_delimiter = ',')]
    attention: Vec<String>,
    /// The KV cache format of `--attention`.
    #[arg(long, default_value_t = KvType::F16)]
    kv: KvType,
    /// Show the matmuls on the matrix units of `--types` too: the prompts' tiled kernel
    /// (`matmul/<type>_coopmat`) and the decode steps' columns in `--decode-tiles`.
    #[arg(long)]
    matmul: bool,
    /// The decode columns' tiles `--matmul` shows, as ROW_BLOCKS:TOKEN_BLOCKS:K_GROUPS
    /// with :K_PARTS where not 8 / ROW_BLOCKS (default: the plan's narrow and wide
    /// tiles on the H100 and H200).
    #[arg(long, value_delimiter = ',', default_value = "2:1:4,4:2:4:4")]
    decode_tiles: Vec<String>,
}

/// naga's SPIR-V options for a flavour: `wgpu` as wgpu-hal's Vulkan backend sets them
/// for a device with robustBufferAccess2 (indices into fixed-size arrays clamped,
/// storage buffers left to the driver, loops bounded, integer division guarded).
fn spirv_options(flavour: &str) -> Result<naga::back::spv::Options<'static>, String> {
    use naga::proc::BoundsCheckPolicy::{Restrict, Unchecked};
    let mut o = naga::back::spv::Options {
        lang_version: (1, 6),
        flags: naga::back::spv::WriterFlags::empty(),
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        use_storage_input_output_16: false,
        ..Default::default()
    };
    o.bounds_check_policies.index = Restrict;
    o.bounds_check_policies.buffer = Unchecked;
    match flavour {
        "wgpu" => {}
        "no-loop" => o.force_loop_bounding = false,
        "no-bounds" => o.bounds_check_policies.index = Unchecked,
        "none" => {
            o.force_loop_bounding = false;
            o.bounds_check_policies.index = Unchecked;
            o.emit_int_div_checks = false;
        }
        other => return Err(format!("unknown flavour `{other}`")),
    }
    Ok(o)
}

fn spirv(name: &str, wgsl: &str, flavour: &str) -> Result<Vec<u32>, String> {
    brass::device::translate::wgsl_to_spirv_with(name, wgsl, "main", &[], &spirv_options(flavour)?)
        .map_err(|e| e.to_string())
}

/// A raw Vulkan device on the adapter brass chose, with pipeline statistics enabled and
/// every feature the adapter has (so any kernel's capabilities are covered).
struct Raw {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    stats: ash::khr::pipeline_executable_properties::Device,
}

impl Raw {
    fn open(name: &str) -> Result<Raw, String> {
        let vk_err = |what: &'static str| move |e: vk::Result| format!("{what}: {e}");
        unsafe {
            let entry = ash::Entry::load().map_err(|e| format!("loading Vulkan: {e}"))?;
            let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
            let instance = entry
                .create_instance(
                    &vk::InstanceCreateInfo::default().application_info(&app),
                    None,
                )
                .map_err(vk_err("vkCreateInstance"))?;
            let physical = instance
                .enumerate_physical_devices()
                .map_err(vk_err("vkEnumeratePhysicalDevices"))?
                .into_iter()
                .find(|&p| {
                    let props = instance.get_physical_device_properties(p);
                    CStr::from_ptr(props.device_name.as_ptr()).to_string_lossy() == name
                })
                .ok_or_else(|| format!("no Vulkan device named `{name}`"))?;
            let offered = instance
                .enumerate_device_extension_properties(physical)
                .map_err(vk_err("vkEnumerateDeviceExtensionProperties"))?;
            let has = |ext: &CStr| {
                offered
                    .iter()
                    .any(|e| CStr::from_ptr(e.extension_name.as_ptr()) == ext)
            };
            if !has(ash::khr::pipeline_executable_properties::NAME) {
                return Err(format!(
                    "`{name}` has no VK_KHR_pipeline_executable_properties"
                ));
            }
            let has_coop = has(ash::khr::cooperative_matrix::NAME);
            let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
            let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
            let mut fpe = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
            let mut fcm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
            let mut features = vk::PhysicalDeviceFeatures2::default()
                .push_next(&mut f11)
                .push_next(&mut f12)
                .push_next(&mut f13)
                .push_next(&mut fpe);
            if has_coop {
                features = features.push_next(&mut fcm);
            }
            instance.get_physical_device_features2(physical, &mut features);
            let queue_family = instance
                .get_physical_device_queue_family_properties(physical)
                .iter()
                .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
                .ok_or("no compute queue")? as u32;
            let priorities = [1.0];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(queue_family)
                .queue_priorities(&priorities)];
            let mut extensions = vec![ash::khr::pipeline_executable_properties::NAME.as_ptr()];
            if has_coop {
                extensions.push(ash::khr::cooperative_matrix::NAME.as_ptr());
            }
            let info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queues)
                .enabled_extension_names(&extensions)
                .push_next(&mut features);
            let device = instance
                .create_device(physical, &info, None)
                .map_err(vk_err("vkCreateDevice"))?;
            let stats = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
            Ok(Raw {
                _entry: entry,
                instance,
                device,
                stats,
            })
        }
    }

    /// (statistic, value) per executable of a compute pipeline made from `words` with
    /// one uniform buffer at binding 0 and `n_storage` storage buffers after it.
    fn statistics(&self, words: &[u32], n_storage: usize) -> Result<Vec<(String, String)>, String> {
        let vk_err = |what: &'static str| move |e: vk::Result| format!("{what}: {e}");
        unsafe {
            let d = &self.device;
            let module = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
                .map_err(vk_err("vkCreateShaderModule"))?;
            let bindings: Vec<_> = (0..=n_storage as u32)
                .map(|b| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(b)
                        .descriptor_type(if b == 0 {
                            vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC
                        } else {
                            vk::DescriptorType::STORAGE_BUFFER
                        })
                        .descriptor_count(1)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            let set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .map_err(vk_err("vkCreateDescriptorSetLayout"))?;
            let set_layouts = [set_layout];
            let layout = d
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts),
                    None,
                )
                .map_err(vk_err("vkCreatePipelineLayout"))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            let info = vk::ComputePipelineCreateInfo::default()
                .flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR)
                .stage(stage)
                .layout(layout);
            let pipeline = d
                .create_compute_pipelines(vk::PipelineCache::null(), &[info], None)
                .map_err(|(_, e)| format!("vkCreateComputePipelines: {e}"))?[0];
            let mut out = Vec::new();
            let executables = self
                .stats
                .get_pipeline_executable_properties(
                    &vk::PipelineInfoKHR::default().pipeline(pipeline),
                )
                .map_err(vk_err("vkGetPipelineExecutablePropertiesKHR"))?;
            for (i, _) in executables.iter().enumerate() {
                let exe = vk::PipelineExecutableInfoKHR::default()
                    .pipeline(pipeline)
                    .executable_index(i as u32);
                for s in self
                    .stats
                    .get_pipeline_executable_statistics(&exe)
                    .map_err(vk_err("vkGetPipelineExecutableStatisticsKHR"))?
                {
                    let name = CStr::from_ptr(s.name.as_ptr())
                        .to_string_lossy()
                        .into_owned();
                    let value = match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                            (s.value.b32 != 0).to_string()
                        }
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                        _ => format!("{:.3}", s.value.f64),
                    };
                    out.push((name, value));
                }
            }
            d.destroy_pipeline(pipeline, None);
            d.destroy_pipeline_layout(layout, None);
            d.destroy_descriptor_set_layout(set_layout, None);
            d.destroy_shader_module(module, None);
            Ok(out)
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("pipeline_stats: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args = Args::parse();
    let choice = match &args.adapter {
        Some(spec) => AdapterChoice::parse(spec),
        None => AdapterChoice::from_env(),
    };
    let device = WgpuDevice::open(&choice).map_err(|e| e.to_string())?;
    let profile = device.profile().clone();
    let raw = Raw::open(&profile.name)?;
    println!("{} ({})", profile.name, profile.driver);
    let show = |name: &str, wgsl: &str, n_storage: usize| -> Result<(), String> {
        for flavour in &args.flavours {
            let words = spirv(name, wgsl, flavour)?;
            let stats = raw.statistics(&words, n_storage)?;
            let line: Vec<String> = stats.iter().map(|(n, v)| format!("{n} {v}")).collect();
            println!("  {flavour:>9}: {}", line.join(", "));
        }
        Ok(())
    };
    for group in &args.attention {
        let spec = SyntheticSpec::preset_by_prefix(group).map_err(|e| e.to_string())?;
        let query = AttentionQuery {
            heads: spec.attention_heads(),
            kv: args.kv,
            n_ctx: 8192,
        };
        let route =
            route_attention(&profile, &query, &Overrides::default()).map_err(|e| e.to_string())?;
        let launch = route.launch();
        println!("\n{} attention: {}", spec.name, launch.pipeline_key());
        show("decode", &launch.source().map_err(|e| e.to_string())?, 6)?;
    }
    if !args.attention.is_empty() {
        let (name, wgsl) = attention::combine_source().map_err(|e| e.to_string())?;
        println!("\n{name}");
        show(&name, &wgsl, 3)?;
    }
    for t in &args.types {
        let ty = GgmlType::from_name(t).ok_or_else(|| format!("unknown type `{t}`"))?;
        let force = match &args.family {
            Some(f) => Some(Force::Family(
                Family::parse(f).ok_or_else(|| format!("unknown family `{f}`"))?,
            )),
            None => None,
        };
        let query = MatvecQuery {
            ty,
            m: args.m,
            k: args.k,
            x: XInput::Norm,
            columns: args.columns,
        };
        let overrides = Overrides {
            force,
            x_q8: Some(args.x_q8),
            ..Overrides::default()
        };
        let route = route_matvec(&profile, &query, &overrides).map_err(|e| e.to_string())?;
        let launch = route.launch();
        let kernel = launch.kernel();
        let wgsl = launch.source().map_err(|e| e.to_string())?;
        let n_storage = launch.template().storage.len();
        println!("\n{} {}x{}: {}", ty, args.m, args.k, route.pipeline_key());
        show(kernel.name, &wgsl, n_storage)?;
        if !args.matmul || launch.family() != Family::Dot4 {
            continue;
        }
        let tiled = route_matmul_engine(&profile, Some(true)).map_err(|e| e.to_string())?;
        let mut columns = Vec::new();
        for tile in &args.decode_tiles {
            let n: Vec<u32> = tile
                .split(':')
                .map(|v| v.parse().map_err(|e| format!("--decode-tiles {tile}: {e}")))
                .collect::<Result<_, _>>()?;
            let [row_blocks, token_blocks, k_groups, ref parts @ ..] = n[..] else {
                return Err(format!(
                    "--decode-tiles {tile}: ROWS:TOKENS:K_GROUPS[:PARTS]"
                ));
            };
            let engine = MatmulEngine::coop_columns(&profile, row_blocks, token_blocks, k_groups)
                .and_then(|e| match parts {
                    [p] => e.in_k_parts(*p),
                    _ => Some(e),
                });
            match engine {
                Some(e) => columns.push(e),
                None => println!("decode tile {tile}: does not fit this adapter"),
            }
        }
        for engine in [tiled.engine()].into_iter().chain(columns) {
            let matmul = MatmulLaunch::of(launch, engine).map_err(|e| e.to_string())?;
            println!("{}", matmul.pipeline_key());
            let wgsl = matmul.source().map_err(|e| e.to_string())?;
            // The params, then the weights, x and y.
            show(matmul.kernel_name(), &wgsl, 3)?;
        }
    }
    Ok(())
}
