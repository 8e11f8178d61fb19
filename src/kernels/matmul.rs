//! Matmul kernels: Y = X·Wᵀ for a batch of tokens (prompt processing), W stored as its
//! dot4 matvec uploads it, X already quantized to int8 per 32 values per token
//! ([`super::matvec::quantize_x_q8`]'s layout, one token after another), Y f32.
//!
//! A matmul reads the same weight buffers as the matrix's matvec: [`MatmulLaunch::of`]
//! makes one from a dot4 [`MatvecLaunch`], with its row parts and layout, so prefill
//! costs no second copy of the weights. Each kernel is `wgsl/matmul/<type>_dot4.wgsl`,
//! which decodes a group of 32 weights into int8 quants and scales, over the driver
//! `wgsl/matmul/dot4.wgsl`, which tiles rows by tokens in workgroup memory.

use serde::Serialize;

use super::matvec::{Family, MatvecKernel, MatvecLaunch, Q8_GROUP_BYTES};
use super::wgsl::{compose, WgslConst};
use super::{PipelineCache, PipelineTemplate};
use crate::device::{Access, Device, DeviceProfile, Dispatch, PipelineId, Slice};
use crate::quant::{dequantize, GgmlType};
use crate::{Error, Result};

/// Rows of a workgroup's tile.
pub const TILE_ROWS: u64 = 64;
/// Tokens of a workgroup's tile.
pub const TILE_TOKENS: u64 = 64;
/// Workgroup memory per group of 32 staged per K step: 64 rows and 64 tokens of two
/// 16-byte halves and a 16-byte tail each.
pub const WORKGROUP_BYTES_PER_GROUP: u64 = (TILE_ROWS + TILE_TOKENS) * 48;

const PARAMS_BYTES: u32 = 32;
const STORAGE: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite];

#[derive(Debug, PartialEq, Eq)]
pub struct MatmulKernel {
    pub ty: GgmlType,
    /// `matmul/<type>_dot4`, also the WGSL file's path under `wgsl/`.
    pub name: &'static str,
    /// The dot4 matvec whose uploaded weights it reads.
    pub matvec: &'static str,
}

macro_rules! matmul {
    ($ty:ident, $file:literal) => {
        MatmulKernel {
            ty: GgmlType::$ty,
            name: concat!("matmul/", $file),
            matvec: concat!("matvec/", $file),
        }
    };
}

/// Every matmul kernel brass has, one per quant type with a dot4 matvec.
pub const MATMUL_KERNELS: &[MatmulKernel] = &[
    matmul!(Q8_0, "q8_0_dot4"),
    matmul!(Q4_0, "q4_0_dot4"),
    matmul!(Q4_1, "q4_1_dot4"),
    matmul!(Q5_0, "q5_0_dot4"),
    matmul!(Q5_1, "q5_1_dot4"),
    matmul!(Q4_K, "q4_k_dot4"),
    matmul!(Q5_K, "q5_k_dot4"),
    matmul!(Q6_K, "q6_k_dot4"),
];

/// The matmul that reads the weights `matvec` uploads, if there is one.
pub fn for_matvec(matvec: &MatvecKernel) -> Option<&'static MatmulKernel> {
    MATMUL_KERNELS.iter().find(|k| k.matvec == matvec.name)
}

/// One dispatch's rows: a weight part of the matvec, in its own binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MatmulPart {
    pub first_row: u64,
    pub rows: u64,
}

/// A matmul's launch: its kernel, shape, weight parts and K step, made once per matrix
/// by [`MatmulLaunch::of`] and never changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MatmulLaunch {
    #[serde(serialize_with = "kernel_name")]
    kernel: &'static MatmulKernel,
    m: u64,
    k: u64,
    row_bytes: u64,
    parts: Vec<MatmulPart>,
    /// Groups of 32 staged per K step.
    k_groups: u32,
}

fn kernel_name<S: serde::Serializer>(k: &&'static MatmulKernel, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.name)
}

impl MatmulLaunch {
    /// The matmul over `matvec`'s weights (same parts, same layout), staging as many
    /// groups per K step as the device's workgroup memory holds, up to 4. An error
    /// names why there is none: the matvec is not dot4, or its type has no matmul.
    pub fn of(matvec: &MatvecLaunch, profile: &DeviceProfile) -> Result<MatmulLaunch> {
        let mv = matvec.kernel();
        if mv.family != Family::Dot4 {
            return Err(Error::Invalid(format!(
                "{}: matmuls read the dot4 matvecs' weights, and this matrix is routed to {}",
                mv.ty, mv.name
            )));
        }
        let kernel = for_matvec(mv).ok_or_else(|| {
            Error::Invalid(format!("{}: no matmul kernel for {}", mv.name, mv.ty))
        })?;
        let fits = profile.workgroup_storage_bytes as u64 / WORKGROUP_BYTES_PER_GROUP;
        let k_groups = [4u32, 2, 1]
            .into_iter()
            .find(|&g| g as u64 <= fits)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: a matmul tile needs {WORKGROUP_BYTES_PER_GROUP} bytes of workgroup \
                     memory, the device has {}",
                    kernel.name, profile.workgroup_storage_bytes
                ))
            })?;
        Ok(MatmulLaunch {
            kernel,
            m: matvec.m(),
            k: matvec.k(),
            row_bytes: matvec.row_bytes(),
            parts: matvec
                .parts()
                .iter()
                .map(|p| MatmulPart {
                    first_row: p.first_row,
                    rows: p.rows,
                })
                .collect(),
            k_groups,
        })
    }

    pub fn kernel(&self) -> &'static MatmulKernel {
        self.kernel
    }

    pub fn m(&self) -> u64 {
        self.m
    }

    pub fn k(&self) -> u64 {
        self.k
    }

    pub fn parts(&self) -> &[MatmulPart] {
        &self.parts
    }

    pub fn k_groups(&self) -> u32 {
        self.k_groups
    }

    /// Bytes of quantized x per token ([`Q8_GROUP_BYTES`] per 32 values).
    pub fn x_bytes_per_token(&self) -> u64 {
        self.k / 32 * Q8_GROUP_BYTES
    }

    /// Multiply-adds times two for `n_tokens` tokens.
    pub fn flops(&self, n_tokens: u64) -> u64 {
        2 * self.m * self.k * n_tokens
    }

    pub fn constants(&self) -> Vec<WgslConst> {
        vec![WgslConst::u32("K_GROUPS", self.k_groups)]
    }

    /// The pipeline's ledger name: the kernel and its K step.
    pub fn pipeline_key(&self) -> String {
        format!("{} k_groups{}", self.kernel.name, self.k_groups)
    }

    pub fn source(&self) -> Result<String> {
        compose(
            &format!("{}.wgsl", self.kernel.name),
            &[],
            &self.constants(),
        )
    }

    pub fn template(&self) -> PipelineTemplate {
        PipelineTemplate {
            params_bytes: PARAMS_BYTES,
            storage: STORAGE,
            fallback_reason: None,
        }
    }

    /// The pipeline, created on first use.
    pub fn pipeline(&self, device: &dyn Device, cache: &PipelineCache) -> Result<PipelineId> {
        cache.get_or_create(device, &self.pipeline_key(), || {
            Ok((self.source()?, self.template()))
        })
    }

    /// The dispatches computing `y[t * y_stride + y_first + i] = (W·x_t)[i]` for the
    /// `n_tokens` tokens t, one per row part.
    ///
    /// `weights[i]` holds the rows of part i as the matvec uploaded them; token t's
    /// quantized x starts at byte `t * x_stride` of `x` (a multiple of 16);
    /// `y_first` and `y_stride` are in elements.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatches(
        &self,
        pipeline: PipelineId,
        weights: &[Slice],
        x: Slice,
        x_stride: u64,
        y: Slice,
        (y_first, y_stride): (u64, u64),
        n_tokens: u64,
    ) -> Result<Vec<Dispatch>> {
        if self.parts.len() != weights.len() {
            return Err(Error::Invalid(format!(
                "{} weight bindings for {} row parts",
                weights.len(),
                self.parts.len()
            )));
        }
        let x_need = n_tokens.saturating_sub(1) * x_stride + self.x_bytes_per_token();
        let y_need = (n_tokens.saturating_sub(1) * y_stride + y_first + self.m) * 4;
        if !x_stride.is_multiple_of(16) || x_stride < self.x_bytes_per_token() || x.size < x_need {
            return Err(Error::Invalid(format!(
                "matmul x: {} bytes with a stride of {x_stride} for {n_tokens} tokens of {}",
                x.size,
                self.x_bytes_per_token()
            )));
        }
        if y_stride < y_first + self.m || y.size < y_need {
            return Err(Error::Invalid(format!(
                "matmul y: {} bytes with a stride of {y_stride} floats for {n_tokens} tokens \
                 of {} from {y_first}",
                y.size, self.m
            )));
        }
        let u32_of = |v: u64, what: &str| {
            u32::try_from(v).map_err(|_| Error::Invalid(format!("matmul {what} {v} exceeds u32")))
        };
        let token_tiles = u32_of(n_tokens.div_ceil(TILE_TOKENS), "token tiles")?;
        self.parts
            .iter()
            .zip(weights)
            .map(|(p, w)| {
                Ok(Dispatch {
                    pipeline,
                    params: vec![
                        u32_of(p.rows, "rows")?,
                        u32_of(self.k, "K")?,
                        u32_of(self.row_bytes, "row bytes")?,
                        u32_of(y_first + p.first_row, "first output")?,
                        u32_of(n_tokens, "tokens")?,
                        u32_of(x_stride / 16, "x stride")?,
                        u32_of(y_stride, "y stride")?,
                        0,
                    ],
                    storage: vec![*w, x, y],
                    workgroups: [
                        token_tiles,
                        u32_of(p.rows.div_ceil(TILE_ROWS), "row tiles")?,
                        1,
                    ],
                    bytes_read: p.rows * self.row_bytes + n_tokens * self.x_bytes_per_token(),
                })
            })
            .collect()
    }

    /// The kernel in one configuration (two groups per K step), for the SPIR-V catalog.
    fn canonical_source(kernel: &MatmulKernel) -> Result<String> {
        compose(
            &format!("{}.wgsl", kernel.name),
            &[],
            &[WgslConst::u32("K_GROUPS", 2)],
        )
    }
}

/// Every matmul kernel as (name, complete WGSL) in its canonical configuration.
pub fn sources() -> Result<Vec<(String, String)>> {
    MATMUL_KERNELS
        .iter()
        .map(|k| Ok((k.name.to_string(), MatmulLaunch::canonical_source(k)?)))
        .collect()
}

/// x as the matmul reads it, back to floats: each int8 value times its group's scale.
/// The matmul's exact answer is W times this.
pub fn dequantize_x_q8(q8: &[u8], k: usize) -> Vec<f32> {
    let groups = q8.chunks_exact(Q8_GROUP_BYTES as usize).take(k / 32);
    groups
        .flat_map(|g| {
            let d = f32::from_le_bytes(g[32..36].try_into().expect("4 bytes"));
            g[..32].iter().map(move |&q| q as i8 as f32 * d)
        })
        .collect()
}

/// CPU reference: `y[t][row]` for each token's quantized x (`x_q8`, `n_tokens` runs of
/// K / 32 groups), from ggml's dequantization of each row, accumulated in f64: the
/// exact value of the integer arithmetic the kernel does.
pub fn cpu_reference(
    ty: GgmlType,
    weights: &[u8],
    (m, k): (usize, usize),
    x_q8: &[u8],
    n_tokens: usize,
) -> Result<Vec<Vec<f32>>> {
    let row_bytes = ty
        .bytes_for(k as u64)
        .ok_or_else(|| Error::Invalid(format!("K = {k} is not a whole number of {ty} blocks")))?
        as usize;
    let x_bytes = k / 32 * Q8_GROUP_BYTES as usize;
    if weights.len() < m * row_bytes || x_q8.len() < n_tokens * x_bytes {
        return Err(Error::Invalid(format!(
            "matmul reference: {} weight bytes and {} x bytes for {m} x {k} {ty} and {n_tokens} \
             tokens",
            weights.len(),
            x_q8.len()
        )));
    }
    let xs: Vec<Vec<f32>> = (0..n_tokens)
        .map(|t| dequantize_x_q8(&x_q8[t * x_bytes..(t + 1) * x_bytes], k))
        .collect();
    let mut out = vec![vec![0f32; m]; n_tokens];
    let mut row = vec![0f32; k];
    for r in 0..m {
        dequantize(ty, &weights[r * row_bytes..(r + 1) * row_bytes], &mut row)?;
        for (t, x) in xs.iter().enumerate() {
            out[t][r] = row
                .iter()
                .zip(x)
                .map(|(&w, &x)| w as f64 * x as f64)
                .sum::<f64>() as f32;
        }
    }
    Ok(out)
}
