//! Loading: a plan's weights uploaded to the device once (every matrix as its matvec
//! lays it out, which its matmul reads too; norms and the embedding table dequantized
//! to f32), the KV cache and RoPE tables, and a decode step's buffers. Nothing is
//! allocated before everything is counted against the device (`MemoryNeed`).

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use super::layout::{batch_bytes, Offsets, StepBuffers, Widths};
use super::{
    plan, AttentionPipelineCells, Layer, LoadOptions, Matrix, MemoryNeed, Model, Plan,
    PlannedMatrix, Weights,
};
use crate::device::{BufferUse, Device, OwnedBuffers, Slice};
use crate::gguf::{GgufFile, TensorInfo};
use crate::kernels::attention::{rope_table, rope_table_scaled};
use crate::kernels::matvec;
use crate::kernels::ops::{EmbedPart, Ops};
use crate::kernels::PipelineCache;
use crate::quant::dequantize;
use crate::{Error, Result};

fn tensor<'f>(file: &'f GgufFile, name: &str) -> Result<&'f TensorInfo> {
    file.tensor(name)
        .ok_or_else(|| Error::Invalid(format!("the model has no `{name}` tensor")))
}

impl Model {
    /// Opens a GGUF file and loads it.
    pub fn load(
        device: Arc<dyn Device>,
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<Model> {
        let file = GgufFile::open(path)?;
        Model::from_gguf(device, &file, options)
    }

    /// Plans an opened file for `device` with `options` ([`plan()`]) and loads it
    /// ([`Model::from_plan`]).
    pub fn from_gguf(
        device: Arc<dyn Device>,
        file: &GgufFile,
        options: &LoadOptions,
    ) -> Result<Model> {
        let plan = plan(file, device.profile(), options)?;
        Model::from_plan(device, file, plan)
    }

    /// Loads `file` as `plan` (made for it by [`plan()`]) says. A plan made for another
    /// profile (a preset) loads where this device can run every launch in it.
    pub fn from_plan(device: Arc<dyn Device>, file: &GgufFile, plan: Plan) -> Result<Model> {
        // The file is mapped: a change since it was opened would load mixed bytes.
        file.check_unchanged()?;
        if file.identity() != plan.file {
            return Err(Error::Invalid(
                "the plan was made for another model than this file".into(),
            ));
        }
        let (config, n_ctx) = (plan.config.clone(), plan.n_ctx);
        let widths = Widths::of(&config, &plan.offsets);
        // Everything counted before anything is allocated, on the host or the device.
        MemoryNeed::of(
            &config,
            file,
            (n_ctx, plan.sequences),
            plan.kv,
            device.profile(),
        )?
        .with_prefill(batch_bytes(
            &widths,
            config.vocab as u64,
            plan.prefill.ubatch(),
            plan.prefill.logits_tokens(),
        ))?
        .check_fits(device.profile(), &config, n_ctx, plan.kv)?;
        for m in plan.matrices() {
            m.route.launch().check(device.profile()).map_err(|e| {
                Error::Invalid(format!("`{}`, planned for {}: {e}", m.name(), plan.device))
            })?;
        }
        let attention = plan.attention.launch();
        attention
            .check(device.profile())
            .map_err(|e| Error::Invalid(format!("attention, planned for {}: {e}", plan.device)))?;
        if let super::PrefillPlan::Batched(b) = &plan.prefill {
            b.attention.launch().check(device.profile()).map_err(|e| {
                Error::Invalid(format!(
                    "prefill attention, planned for {}: {e}",
                    plan.device
                ))
            })?;
        }
        let dev: &dyn Device = device.as_ref();
        // Everything this model creates on the device: freed with the model, or here on
        // any error below.
        let buffers = OwnedBuffers::new(device.clone());
        let (dim, kv_dim) = (config.dim as u64, config.kv_dim() as u64);
        let q_dim = (config.n_heads * config.head_dim) as u64;

        // One batch queue for every dot4 matrix: a step's matvecs run one after another.
        let queue = matvec::create_queue(dev)?;
        buffers.adopt(queue.buffer);
        let upload = |planned: &PlannedMatrix| -> Result<Matrix> {
            let tensors = planned
                .tensors
                .iter()
                .map(|name| Ok(file.tensor_data(tensor(file, name)?)))
                .collect::<Result<Vec<&[u8]>>>()?;
            let launch = planned.route.launch();
            let parts =
                buffers.adopt_all(launch.upload_stacked_weights(dev, &planned.name(), &tensors)?);
            Ok(Matrix {
                queue: (launch.family() == matvec::Family::Dot4).then_some(queue),
                plan: planned.clone(),
                parts,
                matvec: OnceLock::new(),
                matmul: OnceLock::new(),
                unpacked: OnceLock::new(),
                decode_unpacked: OnceLock::new(),
                columns: [OnceLock::new(), OnceLock::new()],
            })
        };
        let uploads = |planned: &[PlannedMatrix]| -> Result<Vec<Matrix>> {
            planned.iter().map(upload).collect()
        };
        let vector = |name: &str, n: u64| -> Result<Slice> {
            let t = tensor(file, name)?;
            if t.n_elements() != n {
                return Err(Error::Invalid(format!(
                    "`{name}` has {} elements, expected {n}",
                    t.n_elements()
                )));
            }
            upload_dequantized(dev, &buffers, file, t, (0, t.rows()), 1.0)
        };
        // The embedding table, dequantized to f32 on the CPU (exact for every type), in
        // as many row parts as the binding limit needs.
        let embd = tensor(file, "token_embd.weight")?;
        if embd.cols() != dim {
            return Err(Error::Invalid(format!(
                "`token_embd.weight` rows have {} values, not {dim}",
                embd.cols()
            )));
        }
        let rows_per_part = (dev.profile().usable_binding_bytes() / (dim * 4)).max(1);
        let vocab = config.vocab as u64;
        let embed = (0..vocab.div_ceil(rows_per_part))
            .map(|i| {
                let first_row = i * rows_per_part;
                let rows = rows_per_part.min(vocab - first_row);
                Ok(EmbedPart {
                    first_row,
                    rows,
                    table: upload_dequantized(
                        dev,
                        &buffers,
                        file,
                        embd,
                        (first_row, rows),
                        config.embed_scale,
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;

        let Offsets {
            k_first, v_first, ..
        } = plan.offsets;
        // Each sequence's region is whole positions and starts where a binding may
        // (`Model::cache_of`); decode attention binds every region of a layer at once.
        let align = device.profile().storage_offset_alignment.max(4) as u64;
        let position_bytes = attention.position_bytes().max(1);
        let mut cache_positions = n_ctx as u64;
        while !(cache_positions * position_bytes).is_multiple_of(align) {
            cache_positions += 1;
        }
        let cache_region = cache_positions * position_bytes;
        attention.check_cache_binding(device.profile(), cache_positions * plan.sequences as u64)?;
        let kv_cache = |name: String| -> Result<Slice> {
            let bytes = cache_region * plan.sequences as u64;
            Ok(Slice::new(
                buffers.create(&name, bytes, BufferUse::Storage)?,
                0,
                bytes,
            ))
        };
        let qkv_width = v_first + kv_dim;
        let no_bias = buffers.create_with(
            "q, k, v bias (none)",
            &vec![0u8; qkv_width as usize * 4],
            BufferUse::Storage,
        )?;
        let qkv_bias = |i: usize| -> Result<Slice> {
            if !config.qkv_bias {
                return Ok(no_bias);
            }
            let mut bias = vec![0f32; qkv_width as usize];
            for (name, first, n) in [
                ("q", 0, q_dim),
                ("k", k_first, kv_dim),
                ("v", v_first, kv_dim),
            ] {
                let name = format!("blk.{i}.attn_{name}.bias");
                let t = tensor(file, &name)?;
                if t.n_elements() != n {
                    return Err(Error::Invalid(format!(
                        "`{name}` has {} elements, expected {n}",
                        t.n_elements()
                    )));
                }
                let bytes = t.ty.bytes_for(n).filter(|_| t.ty.can_dequantize());
                let data = bytes.and_then(|b| file.tensor_data(t).get(..b as usize));
                let data = data.ok_or_else(|| {
                    Error::UnsupportedType(format!("`{name}`: {} values of {}", n, t.ty))
                })?;
                dequantize(t.ty, data, &mut bias[first as usize..][..n as usize])?;
            }
            buffers.create_with(
                &format!("blk.{i} q, k, v bias"),
                bytemuck::cast_slice(&bias),
                BufferUse::Storage,
            )
        };
        // Llama 3.x: per-pair frequency factors for every layer.
        let freq_factors = file
            .tensor("rope_freqs.weight")
            .map(|t| {
                let n = config.rope_dim as u64 / 2;
                let data =
                    t.ty.bytes_for(n)
                        .filter(|_| t.ty.can_dequantize() && t.n_elements() == n);
                let data = data
                    .and_then(|b| file.tensor_data(t).get(..b as usize))
                    .ok_or_else(|| {
                        Error::Invalid(format!(
                            "`rope_freqs.weight` has {} values of {}, expected {n} of a float type",
                            t.n_elements(),
                            t.ty
                        ))
                    })?;
                let mut values = vec![0f32; n as usize];
                dequantize(t.ty, data, &mut values)?;
                if let Some(bad) = values.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                    return Err(Error::Invalid(format!(
                        "`rope_freqs.weight` holds {bad}, not a positive factor"
                    )));
                }
                Ok(values)
            })
            .transpose()?;
        let rope = upload_f32(
            &buffers,
            "rope cos/sin",
            &rope_table_scaled(
                config.rope_base,
                config.rope_dim,
                n_ctx,
                config.rope_position_scale,
                freq_factors.as_deref(),
            ),
        )?;
        let local_rope = config
            .sliding_window
            .map(|w| {
                let table = rope_table(w.rope_base, config.rope_dim, n_ctx);
                upload_f32(&buffers, "rope cos/sin (local layers)", &table)
            })
            .transpose()?;
        let head_dim = config.head_dim as u64;
        let qk_norm = |i: usize| -> Result<Slice> {
            let mut w = Vec::with_capacity(2 * head_dim as usize);
            for name in ["q", "k"] {
                let name = format!("blk.{i}.attn_{name}_norm.weight");
                let t = tensor(file, &name)?;
                let bytes = t.ty.bytes_for(head_dim).filter(|_| t.ty.can_dequantize());
                let data = bytes.and_then(|b| file.tensor_data(t).get(..b as usize));
                let data = data.filter(|_| t.n_elements() == head_dim).ok_or_else(|| {
                    Error::Invalid(format!(
                        "`{name}` has {} values of {}, expected {head_dim} of a float type",
                        t.n_elements(),
                        t.ty
                    ))
                })?;
                let mut values = vec![0f32; head_dim as usize];
                dequantize(t.ty, data, &mut values)?;
                w.extend(values);
            }
            upload_f32(&buffers, &format!("blk.{i} q, k norms"), &w)
        };
        let layers = plan
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                let local = config.sliding_window.filter(|w| w.is_local(i));
                Ok(Layer {
                    attn_norm: vector(&n("attn_norm"), dim)?,
                    qkv: uploads(&l.qkv)?,
                    qkv_bias: qkv_bias(i)?,
                    qk_norm: config.qk_norm.then(|| qk_norm(i)).transpose()?,
                    rope: match (local, local_rope) {
                        (Some(_), Some(table)) => table,
                        _ => rope,
                    },
                    window: local.map(|w| w.window as u64),
                    wo: upload(&l.wo)?,
                    post_norms: config
                        .post_norms
                        .then(|| {
                            Ok::<_, Error>((
                                vector(&n("post_attention_norm"), dim)?,
                                vector(&n("post_ffw_norm"), dim)?,
                            ))
                        })
                        .transpose()?,
                    ffn_norm: vector(&n("ffn_norm"), dim)?,
                    gate_up: uploads(&l.gate_up)?,
                    down: upload(&l.down)?,
                    k_cache: kv_cache(format!("blk.{i} k cache ({})", plan.kv))?,
                    v_cache: kv_cache(format!("blk.{i} v cache ({})", plan.kv))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let output_norm = vector("output_norm.weight", dim)?;
        let output = upload(&plan.output)?;
        let windows = distinct_windows(&layers);
        let step = StepBuffers::new(
            &buffers,
            &widths,
            attention,
            (config.vocab as u64, windows.len() as u64, align),
        )?;
        file.check_unchanged()?;
        // Every pipeline this model creates: destroyed with the model.
        let pipelines = PipelineCache::owning(device.clone());
        Ok(Model {
            ops: Ops::new(config.activation),
            device,
            config,
            weights: Weights {
                embed,
                layers,
                output_norm,
                output,
            },
            step,
            batch: Mutex::new(None),
            attention: AttentionPipelineCells::default(),
            span_sum: OnceLock::new(),
            n_ctx,
            cache_region,
            cache_positions,
            windows,
            plan,
            pipelines,
            _buffers: buffers,
        })
    }
}

fn upload_f32(buffers: &OwnedBuffers<'_>, label: &str, values: &[f32]) -> Result<Slice> {
    buffers.create_with(label, bytemuck::cast_slice(values), BufferUse::Weights)
}

/// Rows `first_row..first_row + rows` of a tensor (a norm's weights, a part of the
/// embedding table), times `scale`, dequantized to f32 on the CPU and uploaded a few MB at a time: the
/// host never holds more than that of a table that may be gigabytes (a 256K-token
/// vocabulary at hidden size 8,192 is 8.6 GB of f32).
fn upload_dequantized(
    dev: &dyn Device,
    buffers: &OwnedBuffers<'_>,
    file: &GgufFile,
    t: &TensorInfo,
    (first_row, rows): (u64, u64),
    scale: f32,
) -> Result<Slice> {
    const PIECE_BYTES: u64 = 4 << 20;
    if !t.ty.can_dequantize() {
        return Err(Error::UnsupportedType(format!(
            "`{}` is {}, which brass cannot read",
            t.name, t.ty
        )));
    }
    let cols = t.cols();
    let row_bytes =
        t.ty.bytes_for(cols)
            .ok_or_else(|| Error::Invalid(format!("`{}`: rows of {cols} values", t.name)))?;
    let data = file.tensor_data(t);
    let bytes = rows * cols * 4;
    let buffer = buffers.create(
        &format!("{} (f32)", t.name),
        bytes.max(4),
        BufferUse::Weights,
    )?;
    let rows_per_piece = (PIECE_BYTES / (cols * 4)).max(1);
    let mut values = Vec::new();
    let mut row = first_row;
    while row < first_row + rows {
        let n = rows_per_piece.min(first_row + rows - row);
        values.resize((n * cols) as usize, 0f32);
        let quantized = data
            .get((row * row_bytes) as usize..((row + n) * row_bytes) as usize)
            .ok_or_else(|| Error::Invalid(format!("`{}` has no row {}", t.name, row + n - 1)))?;
        dequantize(t.ty, quantized, &mut values)?;
        if scale != 1.0 {
            values.iter_mut().for_each(|v| *v *= scale);
        }
        dev.upload(
            buffer,
            (row - first_row) * cols * 4,
            bytemuck::cast_slice(&values),
        )?;
        row += n;
    }
    Ok(Slice::new(buffer, 0, bytes.max(4)))
}

/// The distinct attention windows of `layers`, in layer order: a decode pass's row table
/// has a block of rows for each.
fn distinct_windows(layers: &[Layer]) -> Vec<Option<u64>> {
    let mut windows = Vec::new();
    for l in layers {
        if !windows.contains(&l.window) {
            windows.push(l.window);
        }
    }
    windows
}
