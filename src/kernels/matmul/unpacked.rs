//! The unpacked matmul: a prompt batch's matmul on the adapter's matrix units with both
//! operands decoded once per batch into CT rows in memory, then multiplied straight
//! from there (`matmul/unpacked.wgsl`), where the coopmat engine decodes and stages
//! both in workgroup memory at every K step of every tile. Three kernels:
//! - `matmul/<type>_unpack` decodes a matrix's weights (its dot4 matvec's upload, the
//!   coopmat engine's decoder and arithmetic) into rows of CT, once per batch;
//! - `matmul/unpack_x` converts the batch's q8 x (both int8 planes) into rows of CT,
//!   once per x, for every matrix that multiplies it;
//! - `matmul/unpacked` multiplies them, tiles of rows by tokens per workgroup.
//!
//! The two scratch buffers hold whole tiles ([`UnpackedMatmul::weight_scratch_bytes`],
//! [`UnpackedMatmul::x_scratch_bytes`]) so that the matrix loads never leave them.

use serde::Serialize;

use super::{coop_preamble, MatmulKernel, MatmulPart, PARAMS_BYTES};
use crate::device::{
    Access, CoopMatrix, Device, DeviceProfile, Dispatch, IndexChecks, PipelineId, Slice,
};
use crate::kernels::matvec::{MatvecLaunch, Q8_GROUP_BYTES};
use crate::kernels::wgsl::{compose, WgslConst};
use crate::kernels::{PipelineCache, PipelineTemplate};
use crate::{Error, Result};

/// Subgroups of an unpacked workgroup.
pub const UNPACKED_SUBGROUPS: u32 = 8;
/// Matrix blocks of rows per subgroup.
const PART_ROWS: u64 = 4;
/// Invocations of an unpacking workgroup (`unpack.wgsl`, `unpack_x.wgsl`).
const UNPACK_WG: u64 = 64;

/// How an unpacked matmul multiplies: the matrix shape, the subgroups' size, how its 8
/// subgroups split a tile and how many token blocks each takes, and whether a subgroup
/// loads a step ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UnpackedEngine {
    /// The cooperative-matrix shape multiplied on.
    pub shape: CoopMatrix,
    /// Workgroups are [`UNPACKED_SUBGROUPS`] subgroups of this (the adapter's largest)
    /// size.
    pub subgroup_max: u32,
    /// Subgroups along the rows: 1, 2, 4 or 8 (the rest along the tokens). Each takes
    /// 4 x `part_tokens` matrices, so at S = 16 with 2 a tile is 64 rows by 256 tokens
    /// (1), 128 x 128 (2), 256 x 64 (4) or 512 x 32 (8).
    pub row_parts: u32,
    /// Blocks of S tokens per subgroup: 2 or 4 (twice the accumulators, each row
    /// matrix loaded feeding twice the multiplies).
    pub part_tokens: u32,
    /// Each subgroup loads the next K step's matrices before it multiplies this one's.
    pub prefetch: bool,
}

impl UnpackedEngine {
    /// The engine of `row_parts` and `prefetch` on `profile`, or why it cannot run
    /// there: no cooperative matrices or subgroups, a workgroup past the invocation
    /// limit, or `row_parts` not 1, 2, 4 or 8.
    pub fn on(
        profile: &DeviceProfile,
        (row_parts, part_tokens): (u32, u32),
        prefetch: bool,
    ) -> Result<UnpackedEngine> {
        let shape = profile
            .coop_matrix
            .ok_or_else(|| Error::Invalid(format!("{}: no cooperative matrices", profile.name)))?;
        if !profile.subgroups {
            return Err(Error::Invalid(format!("{}: no subgroups", profile.name)));
        }
        let invocations = UNPACKED_SUBGROUPS * profile.subgroup_max;
        if invocations > profile.max_invocations_per_workgroup {
            return Err(Error::Invalid(format!(
                "{}: an unpacked matmul's {invocations} invocations exceed the workgroup's {}",
                profile.name, profile.max_invocations_per_workgroup
            )));
        }
        UnpackedEngine::new(
            shape,
            profile.subgroup_max,
            (row_parts, part_tokens),
            prefetch,
        )
    }

    /// The engine on matrices of `shape` in subgroups of `subgroup_max`, whatever the
    /// adapter (the tests run it with its matrices emulated); an error where
    /// `row_parts` is not 1, 2, 4 or 8, or `part_tokens` not 2 or 4.
    pub fn new(
        shape: CoopMatrix,
        subgroup_max: u32,
        (row_parts, part_tokens): (u32, u32),
        prefetch: bool,
    ) -> Result<UnpackedEngine> {
        if ![1, 2, 4, 8].contains(&row_parts) || ![2, 4].contains(&part_tokens) {
            return Err(Error::Invalid(format!(
                "unpacked matmul: {row_parts} row parts (1, 2, 4 or 8) of {part_tokens} \
                 token blocks (2 or 4)"
            )));
        }
        Ok(UnpackedEngine {
            shape,
            subgroup_max,
            row_parts,
            part_tokens,
            prefetch,
        })
    }

    /// Rows of a workgroup's tile.
    pub fn tile_rows(&self) -> u64 {
        self.row_parts as u64 * PART_ROWS * self.shape.size as u64
    }

    /// Tokens of a workgroup's tile.
    pub fn tile_tokens(&self) -> u64 {
        let token_parts = (UNPACKED_SUBGROUPS / self.row_parts) as u64;
        token_parts * self.part_tokens as u64 * self.shape.size as u64
    }
}

/// An unpacked matmul's launch: the matrix (its type's kernel, shape, weight parts) and
/// the engine, made once per matrix by [`UnpackedMatmul::of`] and never changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UnpackedMatmul {
    #[serde(serialize_with = "super::kernel_name")]
    kernel: &'static MatmulKernel,
    m: u64,
    k: u64,
    row_bytes: u64,
    parts: Vec<MatmulPart>,
    engine: UnpackedEngine,
}

const UNPACK_STORAGE: &[Access] = &[Access::Read, Access::ReadWrite];
const GEMM_STORAGE: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite];

impl UnpackedMatmul {
    /// The unpacked matmul over `matvec`'s weights (same parts, same layout), which must
    /// be a dot4 matvec's (the layouts `matmul/<type>.wgsl` decodes).
    pub fn of(matvec: &MatvecLaunch, engine: UnpackedEngine) -> Result<UnpackedMatmul> {
        let mv = matvec.kernel();
        let kernel = super::for_matvec(mv)
            .filter(|k| k.unpack.is_some())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: no unpacked matmul reads {} weights laid out as {:?}",
                    mv.name, mv.ty, mv.layout
                ))
            })?;
        Ok(UnpackedMatmul {
            kernel,
            m: matvec.m(),
            k: matvec.k(),
            row_bytes: matvec.row_bytes(),
            parts: super::parts_of(matvec),
            engine,
        })
    }

    /// The kernel whose type's decoder unpacks the weights.
    pub fn kernel(&self) -> &'static MatmulKernel {
        self.kernel
    }

    /// Rows of W: values per token of Y.
    pub fn m(&self) -> u64 {
        self.m
    }

    /// Columns of W: values per token of X.
    pub fn k(&self) -> u64 {
        self.k
    }

    /// How it multiplies.
    pub fn engine(&self) -> UnpackedEngine {
        self.engine
    }

    /// Multiply-adds times two for `n_tokens` tokens.
    pub fn flops(&self, n_tokens: u64) -> u64 {
        2 * self.m * self.k * n_tokens
    }

    /// Bytes of the unpacked weights: whole tiles of rows, K values of CT each.
    pub fn weight_scratch_bytes(&self) -> u64 {
        let rows = self.m.div_ceil(self.engine.tile_rows()) * self.engine.tile_rows();
        rows * self.k * self.engine.shape.input.bytes()
    }

    /// Bytes of `n_tokens` tokens' unpacked x: whole tiles of tokens, K values of CT
    /// each.
    pub fn x_scratch_bytes(&self, n_tokens: u64) -> u64 {
        let tokens = n_tokens.div_ceil(self.engine.tile_tokens()) * self.engine.tile_tokens();
        tokens * self.k * self.engine.shape.input.bytes()
    }

    /// Bytes of q8 x per token.
    pub fn x_bytes_per_token(&self) -> u64 {
        self.k / 32 * Q8_GROUP_BYTES
    }

    fn unpack_name(&self) -> &'static str {
        // `of` keeps only kernels with an unpack file.
        self.kernel.unpack.unwrap_or("matmul/unpack")
    }

    fn ct_consts(&self) -> (Vec<&'static str>, Vec<WgslConst>) {
        let (enables, consts) = coop_preamble(self.engine.shape);
        let enables = enables.into_iter().filter(|&e| e == "f16").collect();
        let ct = consts.into_iter().filter(|c| c.name == "CT").collect();
        (enables, ct)
    }

    /// The weights' unpacking kernel, composed.
    pub fn unpack_source(&self) -> Result<String> {
        let (enables, consts) = self.ct_consts();
        compose(&format!("{}.wgsl", self.unpack_name()), &enables, &consts)
    }

    /// x's unpacking kernel, composed.
    pub fn x_source(&self) -> Result<String> {
        let (enables, consts) = self.ct_consts();
        compose("matmul/unpack_x.wgsl", &enables, &consts)
    }

    /// The multiplying kernel, composed.
    pub fn gemm_source(&self) -> Result<String> {
        let e = self.engine;
        let (enables, mut consts) = coop_preamble(e.shape);
        consts.push(WgslConst::u32("SUBGROUP_MAX", e.subgroup_max));
        consts.push(WgslConst::u32("ROW_PARTS", e.row_parts));
        consts.push(WgslConst::u32("BT", e.part_tokens));
        consts.push(WgslConst::bool("PREFETCH", e.prefetch));
        compose("matmul/unpacked.wgsl", &enables, &consts)
    }

    /// The three pipelines' ledger names: weights' unpacking, x's, the multiply.
    pub fn pipeline_keys(&self) -> [String; 3] {
        let e = self.engine;
        let ct = e.shape.input.wgsl();
        [
            format!("{} {ct}", self.unpack_name()),
            format!("matmul/unpack_x {ct}"),
            format!(
                "matmul/unpacked {} wg{} rows{} tokens{}{}",
                e.shape,
                UNPACKED_SUBGROUPS * e.subgroup_max,
                e.tile_rows(),
                e.tile_tokens(),
                if e.prefetch { " prefetch" } else { "" }
            ),
        ]
    }

    /// The three pipelines' bindings: the unpacking kernels bind their input and their
    /// output, the multiply W, x and y.
    pub fn templates() -> [PipelineTemplate; 3] {
        let unpack = PipelineTemplate {
            params_bytes: PARAMS_BYTES,
            storage: UNPACK_STORAGE,
            fallback_reason: None,
            index_checks: IndexChecks::Wgpu,
        };
        let unpack_x = PipelineTemplate {
            params_bytes: 16,
            ..unpack
        };
        let gemm = PipelineTemplate {
            params_bytes: PARAMS_BYTES,
            storage: GEMM_STORAGE,
            fallback_reason: None,
            index_checks: IndexChecks::Kernel,
        };
        [unpack, unpack_x, gemm]
    }

    /// The three pipelines (weights' unpacking, x's, the multiply), created on first
    /// use.
    pub fn pipelines(&self, device: &dyn Device, cache: &PipelineCache) -> Result<[PipelineId; 3]> {
        let [uk, xk, gk] = self.pipeline_keys();
        let [ut, xt, gt] = Self::templates();
        Ok([
            cache.get_or_create(device, &uk, || Ok((self.unpack_source()?, ut)))?,
            cache.get_or_create(device, &xk, || Ok((self.x_source()?, xt)))?,
            cache.get_or_create(device, &gk, || Ok((self.gemm_source()?, gt)))?,
        ])
    }

    /// The dispatches unpacking the weights, one per row part: `weights[i]` holds part
    /// i's rows as the matvec uploaded them, `out` is
    /// [`Self::weight_scratch_bytes`] or more.
    pub fn unpack_dispatches(
        &self,
        device: &DeviceProfile,
        pipeline: PipelineId,
        weights: &[Slice],
        out: Slice,
    ) -> Result<Vec<Dispatch>> {
        if self.parts.len() != weights.len() {
            return Err(Error::Invalid(format!(
                "{} weight bindings for {} row parts",
                weights.len(),
                self.parts.len()
            )));
        }
        if out.size < self.weight_scratch_bytes() {
            return Err(Error::Invalid(format!(
                "unpacked weights: {} bytes for {} rows of {} ({} needed)",
                out.size,
                self.m,
                self.k,
                self.weight_scratch_bytes()
            )));
        }
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
                        u32_of(p.first_row, "first row")?,
                        0,
                        0,
                        0,
                        0,
                    ],
                    storage: vec![*w, out],
                    workgroups: grid(device, p.rows * (self.k / 32))?,
                    bytes_read: p.rows * self.row_bytes,
                })
            })
            .collect()
    }

    /// The dispatch unpacking `n_tokens` tokens of q8 x (token t's at byte `t *
    /// x_stride` of `x`, a multiple of 16) into `out`, [`Self::x_scratch_bytes`] or
    /// more.
    pub fn unpack_x_dispatch(
        &self,
        device: &DeviceProfile,
        pipeline: PipelineId,
        x: Slice,
        x_stride: u64,
        out: Slice,
        n_tokens: u64,
    ) -> Result<Dispatch> {
        let per_token = self.x_bytes_per_token();
        let x_need = n_tokens.saturating_sub(1) * x_stride + per_token;
        if !x_stride.is_multiple_of(16) || x_stride < per_token || x.size < x_need {
            return Err(Error::Invalid(format!(
                "unpacked matmul x: {} bytes with a stride of {x_stride} for {n_tokens} \
                 tokens of {per_token}",
                x.size
            )));
        }
        if out.size < self.x_scratch_bytes(n_tokens) {
            return Err(Error::Invalid(format!(
                "unpacked x: {} bytes for {n_tokens} tokens of {} ({} needed)",
                out.size,
                self.k,
                self.x_scratch_bytes(n_tokens)
            )));
        }
        Ok(Dispatch {
            pipeline,
            params: vec![
                u32_of(n_tokens, "tokens")?,
                u32_of(self.k, "K")?,
                u32_of(x_stride / 16, "x stride")?,
                0,
            ],
            storage: vec![x, out],
            workgroups: grid(device, n_tokens * (self.k / 32))?,
            bytes_read: n_tokens * per_token,
        })
    }

    /// The dispatch computing `y[t * y_stride + y_first + i] = (W·x_t)[i]` for
    /// `n_tokens` tokens from the unpacked weights `w` and x `xs`.
    pub fn gemm_dispatch(
        &self,
        pipeline: PipelineId,
        (w, xs): (Slice, Slice),
        y: Slice,
        (y_first, y_stride): (u64, u64),
        n_tokens: u64,
    ) -> Result<Dispatch> {
        let y_need = (n_tokens.saturating_sub(1) * y_stride + y_first + self.m) * 4;
        if y_stride < y_first + self.m || y.size < y_need {
            return Err(Error::Invalid(format!(
                "matmul y: {} bytes with a stride of {y_stride} floats for {n_tokens} tokens \
                 of {} from {y_first}",
                y.size, self.m
            )));
        }
        if w.size < self.weight_scratch_bytes() || xs.size < self.x_scratch_bytes(n_tokens) {
            return Err(Error::Invalid(format!(
                "unpacked matmul: {} bytes of weights and {} of x for {} x {} and {n_tokens} \
                 tokens ({} and {} needed)",
                w.size,
                xs.size,
                self.m,
                self.k,
                self.weight_scratch_bytes(),
                self.x_scratch_bytes(n_tokens)
            )));
        }
        let e = self.engine;
        Ok(Dispatch {
            pipeline,
            params: vec![
                u32_of(self.m, "rows")?,
                u32_of(self.k, "K")?,
                u32_of(n_tokens, "tokens")?,
                u32_of(y_first, "first output")?,
                u32_of(y_stride, "y stride")?,
                0,
                0,
                0,
            ],
            storage: vec![w, xs, y],
            workgroups: [
                u32_of(n_tokens.div_ceil(e.tile_tokens()), "token tiles")?,
                u32_of(self.m.div_ceil(e.tile_rows()), "row tiles")?,
                1,
            ],
            bytes_read: self.weight_scratch_bytes() + self.x_scratch_bytes(n_tokens),
        })
    }
}

fn u32_of(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Invalid(format!("unpacked matmul {what} {v} exceeds u32")))
}

/// Workgroups of [`UNPACK_WG`] for `items` invocations, as x by y within the device's
/// limit per dimension.
fn grid(device: &DeviceProfile, items: u64) -> Result<[u32; 3]> {
    let groups = items.div_ceil(UNPACK_WG).max(1);
    let x = groups.min(device.max_workgroups_per_dim as u64);
    let y = groups.div_ceil(x);
    if y > device.max_workgroups_per_dim as u64 {
        return Err(Error::Invalid(format!(
            "unpacking {items} groups takes {groups} workgroups, past {} x {}",
            x, device.max_workgroups_per_dim
        )));
    }
    Ok([x as u32, y as u32, 1])
}

/// Every unpacked kernel in its canonical configurations: each type's weights, and x,
/// unpacked to f16; the multiply on 16 x 16 and 8 x 8 f16 matrices with subgroups of
/// 32, 2 row parts of 2 token blocks, loading a step ahead.
pub fn sources() -> Result<Vec<(String, String)>> {
    let launch = |kernel, size| -> Result<UnpackedMatmul> {
        let shape = CoopMatrix::f16_as_offered(size);
        Ok(UnpackedMatmul {
            kernel,
            m: 0,
            k: 0,
            row_bytes: 0,
            parts: Vec::new(),
            engine: UnpackedEngine::new(shape, 32, (2, 2), true)?,
        })
    };
    let mut out = Vec::new();
    let unpacking = super::MATMUL_KERNELS.iter().filter(|k| k.unpack.is_some());
    for kernel in unpacking.clone() {
        let l = launch(kernel, 16)?;
        out.push((l.unpack_name().to_string(), l.unpack_source()?));
    }
    let any = unpacking.clone().next().expect("quant types unpack");
    out.push(("matmul/unpack_x".to_string(), launch(any, 16)?.x_source()?));
    for size in [16, 8] {
        let name = format!("matmul/unpacked_{size}x{size}");
        out.push((name, launch(any, size)?.gemm_source()?));
    }
    Ok(out)
}
