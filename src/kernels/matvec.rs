//! Matvec kernels: y = W·x with W stored as in GGUF (row-major, rows of quant blocks),
//! x and y f32.
//!
//! Two families per weight type (see DESIGN.md, "Kernels"):
//! - `Scalar`: one invocation per row, byte-at-a-time reads; core WGSL only.
//! - `Coop`: one subgroup per row, x staged per workgroup in K-tiles.
//!
//! A kernel's WGSL is a family driver (`wgsl/matvec/scalar.wgsl`, `coop.wgsl`) followed by
//! the per-type file (`wgsl/matvec/<type>_<family>.wgsl`).

use serde::Serialize;

use crate::device::{Access, Dispatch, PipelineId, Slice};
use crate::quant::{dequantize, GgmlType};
use crate::{Error, Result};

use super::PipelineTemplate;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Family {
    Scalar,
    Coop,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Scalar => "scalar",
            Family::Coop => "coop",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "scalar" => Some(Family::Scalar),
            "coop" => Some(Family::Coop),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub struct MatvecKernel {
    pub ty: GgmlType,
    pub family: Family,
    /// `matvec/<type>_<family>`, also the WGSL file's path under `wgsl/`.
    pub name: &'static str,
    /// WGSL functions shared with sibling kernels, placed before `body`.
    helpers: &'static str,
    body: &'static str,
}

const SCALAR_DRIVER: &str = include_str!("../../wgsl/matvec/scalar.wgsl");
const COOP_DRIVER: &str = include_str!("../../wgsl/matvec/coop.wgsl");

macro_rules! kernel {
    ($ty:ident, $family:ident, $file:literal) => {
        kernel!($ty, $family, $file, "")
    };
    ($ty:ident, $family:ident, $file:literal, $helpers:expr) => {
        MatvecKernel {
            ty: GgmlType::$ty,
            family: Family::$family,
            name: concat!("matvec/", $file),
            helpers: $helpers,
            body: include_str!(concat!("../../wgsl/matvec/", $file, ".wgsl")),
        }
    };
}

/// WGSL shared by the kernels of the K-quants with packed 6-bit scales (Q4_K, Q5_K).
const K_SCALE_MIN_SCALAR: &str = include_str!("../../wgsl/matvec/k_scale_min_scalar.wgsl");
const K_SCALE_MIN_COOP: &str = include_str!("../../wgsl/matvec/k_scale_min_coop.wgsl");

/// Every matvec kernel brass has: the dispatch table, one line per kernel.
pub const MATVEC_KERNELS: &[MatvecKernel] = &[
    kernel!(F32, Scalar, "f32_scalar"),
    kernel!(F32, Coop, "f32_coop"),
    kernel!(F16, Scalar, "f16_scalar"),
    kernel!(F16, Coop, "f16_coop"),
    kernel!(Q8_0, Scalar, "q8_0_scalar"),
    kernel!(Q8_0, Coop, "q8_0_coop"),
    kernel!(Q4_0, Scalar, "q4_0_scalar"),
    kernel!(Q4_0, Coop, "q4_0_coop"),
    kernel!(Q5_0, Scalar, "q5_0_scalar"),
    kernel!(Q5_0, Coop, "q5_0_coop"),
    kernel!(Q5_1, Scalar, "q5_1_scalar"),
    kernel!(Q5_1, Coop, "q5_1_coop"),
    kernel!(Q4_1, Scalar, "q4_1_scalar"),
    kernel!(Q4_1, Coop, "q4_1_coop"),
    kernel!(Q4_K, Scalar, "q4_k_scalar", K_SCALE_MIN_SCALAR),
    kernel!(Q4_K, Coop, "q4_k_coop", K_SCALE_MIN_COOP),
    kernel!(Q5_K, Scalar, "q5_k_scalar", K_SCALE_MIN_SCALAR),
    kernel!(Q5_K, Coop, "q5_k_coop", K_SCALE_MIN_COOP),
    kernel!(Q6_K, Scalar, "q6_k_scalar"),
    kernel!(Q6_K, Coop, "q6_k_coop"),
];

pub fn find(ty: GgmlType, family: Family) -> Option<&'static MatvecKernel> {
    MATVEC_KERNELS
        .iter()
        .find(|k| k.ty == ty && k.family == family)
}

pub fn find_by_name(name: &str) -> Option<&'static MatvecKernel> {
    let name = name.strip_prefix("matvec/").unwrap_or(name);
    MATVEC_KERNELS
        .iter()
        .find(|k| &k.name["matvec/".len()..] == name)
}

/// Launch-time choices for a coop kernel (the scalar family has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct CoopConfig {
    /// Invocations per workgroup.
    pub wg: u32,
    /// Elements of x staged per tile; a multiple of 256, so of every block size.
    pub tile: u32,
    /// Stage x as f16 (needs SHADER_F16).
    pub x_f16: bool,
    /// Rows per subgroup (1 or 2): two rows share every x read and overlap their
    /// weight loads, at the price of half as many subgroups in flight.
    pub rows: u32,
}

impl CoopConfig {
    /// Bytes per staged x element.
    pub fn xs_bytes(&self) -> u64 {
        if self.x_f16 {
            2
        } else {
            4
        }
    }

    /// Workgroup memory the staged tile takes: each 32-element unit is padded to an odd
    /// number of words (see `wgsl/matvec/coop.wgsl`).
    pub fn workgroup_bytes(&self) -> u64 {
        Self::tile_bytes(self.tile as u64, self.xs_bytes())
    }

    pub fn tile_bytes(tile: u64, xs_bytes: u64) -> u64 {
        (tile / 32) * (32 + 4 / xs_bytes) * xs_bytes
    }
}

/// Bytes of the uniform block both drivers declare: m, k, row_bytes, y_offset.
pub const PARAMS_BYTES: u32 = 16;
const STORAGE: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite];

impl MatvecKernel {
    /// The complete WGSL source.
    pub fn source(&self, coop: Option<CoopConfig>) -> String {
        match (self.family, coop) {
            (Family::Scalar, _) => format!("{SCALAR_DRIVER}\n{}\n{}", self.helpers, self.body),
            (Family::Coop, cfg) => {
                let cfg = cfg.unwrap_or(CoopConfig {
                    wg: 256,
                    tile: 4096,
                    x_f16: false,
                    rows: 1,
                });
                let (enable, xs) = if cfg.x_f16 {
                    ("enable f16;\n", "f16")
                } else {
                    ("", "f32")
                };
                format!(
                    "{enable}const WG: u32 = {}u;\nconst TILE: u32 = {}u;\nconst ROWS: u32 = {}u;\n\
                     const XS_BYTES: u32 = {}u;\nalias XS = {xs};\n\n{COOP_DRIVER}\n{}\n{}",
                    cfg.wg,
                    cfg.tile,
                    cfg.rows,
                    cfg.xs_bytes(),
                    self.helpers,
                    self.body
                )
            }
        }
    }

    /// The pipeline's ledger name: kernel plus whatever changes its code.
    pub fn pipeline_key(&self, coop: Option<CoopConfig>) -> String {
        match (self.family, coop) {
            (Family::Coop, Some(c)) => format!(
                "{} wg{} tile{}{}{}",
                self.name,
                c.wg,
                c.tile,
                if c.x_f16 { " xf16" } else { "" },
                if c.rows > 1 {
                    format!(" r{}", c.rows)
                } else {
                    String::new()
                }
            ),
            _ => self.name.to_string(),
        }
    }

    pub fn template(&self) -> PipelineTemplate {
        PipelineTemplate {
            params_bytes: PARAMS_BYTES,
            storage: STORAGE,
            fallback_reason: None,
        }
    }
}

/// One dispatch's worth of rows: a weight part lives in its own binding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowPart {
    pub first_row: u64,
    pub rows: u64,
    pub workgroups: [u32; 3],
}

/// The dispatches computing y = W·x for weights bound part by part.
///
/// `weights[i]` holds the rows of `parts[i]`; `x` holds K floats, `y` at least M.
pub fn dispatches(
    pipeline: PipelineId,
    k: u64,
    row_bytes: u64,
    parts: &[RowPart],
    weights: &[Slice],
    x: Slice,
    y: Slice,
) -> Result<Vec<Dispatch>> {
    if parts.len() != weights.len() {
        return Err(Error::Invalid(format!(
            "{} weight bindings for {} row parts",
            weights.len(),
            parts.len()
        )));
    }
    let u32_of = |v: u64, what: &str| {
        u32::try_from(v).map_err(|_| Error::Invalid(format!("matvec {what} {v} exceeds u32")))
    };
    parts
        .iter()
        .zip(weights)
        .map(|(p, w)| {
            Ok(Dispatch {
                pipeline,
                params: vec![
                    u32_of(p.rows, "rows")?,
                    u32_of(k, "K")?,
                    u32_of(row_bytes, "row bytes")?,
                    u32_of(p.first_row, "first row")?,
                ],
                storage: vec![*w, x, y],
                workgroups: p.workgroups,
                bytes_read: p.rows * row_bytes + k * 4,
            })
        })
        .collect()
}

/// CPU reference: dequantize each row exactly as ggml does, accumulate in f64.
pub fn cpu_reference(
    ty: GgmlType,
    weights: &[u8],
    m: usize,
    k: usize,
    x: &[f32],
) -> Result<Vec<f32>> {
    let row_bytes = ty
        .bytes_for(k as u64)
        .ok_or_else(|| Error::Invalid(format!("K = {k} is not a whole number of {ty} blocks")))?
        as usize;
    if weights.len() < m * row_bytes || x.len() < k {
        return Err(Error::Invalid(format!(
            "matvec reference: {} weight bytes and {} x values for {m} x {k} {ty}",
            weights.len(),
            x.len()
        )));
    }
    let mut row = vec![0f32; k];
    (0..m)
        .map(|r| {
            dequantize(ty, &weights[r * row_bytes..(r + 1) * row_bytes], &mut row)?;
            Ok(row
                .iter()
                .zip(x)
                .map(|(&w, &x)| w as f64 * x as f64)
                .sum::<f64>() as f32)
        })
        .collect()
}

/// Normalized mean squared error, the bound llama.cpp's backend tests put on MUL_MAT.
pub fn nmse(reference: &[f32], actual: &[f32]) -> f64 {
    let err: f64 = reference
        .iter()
        .zip(actual)
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    let norm: f64 = reference.iter().map(|&a| (a as f64).powi(2)).sum();
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}

/// Uploads a weight tensor for `route`: one buffer per row part.
pub fn upload_weights(
    device: &dyn crate::device::Device,
    label: &str,
    route: &crate::router::Route,
    bytes: &[u8],
) -> Result<Vec<Slice>> {
    let expected = route.m * route.row_bytes;
    if bytes.len() as u64 != expected {
        return Err(Error::Invalid(format!(
            "`{label}`: {} bytes for a {} x {} {} matrix of {expected} bytes",
            bytes.len(),
            route.m,
            route.k,
            route.ty
        )));
    }
    route
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let start = (p.first_row * route.row_bytes) as usize;
            let len = (p.rows * route.row_bytes) as usize;
            let name = if route.parts.len() == 1 {
                label.to_string()
            } else {
                format!("{label} part {i}")
            };
            let buffer =
                device.create_buffer(&name, len as u64, crate::device::BufferUse::Weights)?;
            device.upload(buffer, 0, &bytes[start..start + len])?;
            Ok(Slice::new(buffer, 0, (len as u64).next_multiple_of(4)))
        })
        .collect()
}

/// The pipeline for `route`, created on first use.
pub fn pipeline(
    device: &dyn crate::device::Device,
    cache: &super::PipelineCache,
    route: &crate::router::Route,
) -> Result<PipelineId> {
    let kernel = route.matvec_kernel();
    cache.get_or_create(device, &route.pipeline_key(), || {
        (kernel.source(route.coop), kernel.template())
    })
}
