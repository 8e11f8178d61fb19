//! Matmul kernels: Y = X·Wᵀ for a batch of tokens (prompt processing), Y f32. A matmul
//! reads W as one family of its type's matvecs uploads it ([`MatmulInput`]):
//! - a quant type's dot4 matmul, the dot4 matvec's layout, with X already quantized to
//!   int8 per 32 values per token ([`super::matvec::quantize_x_q8`]'s layout, one token
//!   after another), as the dot4 matvec rounds it;
//! - every type's fma matmul (`matmul/<type>_fma`), the GGUF rows that its coop and
//!   scalar matvecs upload, with X f32: the exact route's activations, kept in float.
//!
//! A matmul reads the same weight buffers as the matrix's matvec: [`MatmulLaunch::of`]
//! makes one from a [`MatvecLaunch`], with its row parts and layout, so prefill
//! costs no second copy of the weights. A kernel is a driver, which tiles rows by
//! tokens in workgroup memory, over its type's decoder. Over the dot4 layouts the
//! decoder is `wgsl/matmul/<type>.wgsl`, which decodes a group of 32 weights into int8
//! quants and scales, under one of two drivers ([`MatmulEngine`]): `matmul/dot4.wgsl`
//! multiplies the int8 values on dot4I8Packed, `matmul/coopmat.wgsl` their values (f16)
//! on the adapter's cooperative matrices. Over GGUF rows, `matmul/<type>_fma.wgsl`
//! decodes one weight at a time (ggml's formulas) for a third driver, `matmul/fma.wgsl`:
//! f32 multiply-adds, nothing an adapter might lack.

mod unpacked;

pub use unpacked::{UnpackedEngine, UnpackedMatmul, UNPACKED_SUBGROUPS};

use serde::Serialize;

use super::matvec::{Family, Layout, MatvecKernel, MatvecLaunch, Q8_GROUP_BYTES};
use super::wgsl::{compose, WgslConst};
use super::{PipelineCache, PipelineTemplate};
use crate::device::{
    Access, CoopInput, CoopMatrix, Device, DeviceProfile, Dispatch, IndexChecks, PipelineId, Slice,
};
use crate::quant::{dequantize, GgmlType};
use crate::{Error, Result};

/// Rows and tokens of a dot4 workgroup's tile.
pub const DOT4_TILE: u64 = 64;
/// A dot4 workgroup's memory per group of 32 staged per K step: 64 rows and 64 tokens
/// of two 16-byte halves and a 16-byte tail each.
pub const WORKGROUP_BYTES_PER_GROUP: u64 = 2 * DOT4_TILE * 48;

/// Rows and tokens of an fma workgroup's tile.
pub const FMA_TILE: u64 = 64;
/// Weights (and x values) per row an fma workgroup stages per K step. Its workgroup
/// memory, two tiles of 16 x 65 f32 (8,320 bytes), fits WebGPU's guaranteed 16 KiB, so
/// the fma matmuls need no check against the device.
pub const FMA_K_STEP: u32 = 16;

const PARAMS_BYTES: u32 = 32;
const STORAGE: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite];

/// The form a matmul takes x in, token after token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum MatmulInput {
    /// int8 per 32 values ([`Q8_GROUP_BYTES`] a group, `quantize_x_q8`'s layout): the
    /// kernels over the dot4 matvecs' weights.
    Q8,
    /// f32 values: the fma kernels, exact activations as the matvecs whose weights they
    /// read take them.
    F32,
}

/// A matmul kernel: its weight type, its WGSL files and the matvec whose weights it
/// reads. [`MATMUL_KERNELS`] lists them all.
#[derive(Debug, PartialEq, Eq)]
pub struct MatmulKernel {
    /// The weight type it reads.
    pub ty: GgmlType,
    /// `matmul/<type>_dot4` or `matmul/<type>_fma`, also the WGSL file's path under
    /// `wgsl/`.
    pub name: &'static str,
    /// `matmul/<type>_coopmat`: the dot4 kernel's weights on cooperative matrices.
    pub coopmat: Option<&'static str>,
    /// `matmul/<type>_columns`: the same weights on cooperative matrices in a decode
    /// step's shape (a few tokens, [`MatmulEngine::CoopColumns`]).
    pub columns: Option<&'static str>,
    /// `matmul/<type>_unpack`: the same weights decoded once into rows of the matrix
    /// units' input type, for the unpacked matmul ([`UnpackedMatmul`]).
    pub unpack: Option<&'static str>,
    /// The dot4 matvec whose uploaded weights it reads; None for the fma kernels, which
    /// read the GGUF rows that every non-dot4 matvec of their type uploads.
    pub matvec: Option<&'static str>,
    /// The form it takes x in.
    pub input: MatmulInput,
}

macro_rules! matmul {
    ($ty:ident, $stem:literal) => {
        MatmulKernel {
            ty: GgmlType::$ty,
            name: concat!("matmul/", $stem, "_dot4"),
            coopmat: Some(concat!("matmul/", $stem, "_coopmat")),
            columns: Some(concat!("matmul/", $stem, "_columns")),
            unpack: Some(concat!("matmul/", $stem, "_unpack")),
            matvec: Some(concat!("matvec/", $stem, "_dot4")),
            input: MatmulInput::Q8,
        }
    };
    ($ty:ident, $stem:literal, fma) => {
        MatmulKernel {
            ty: GgmlType::$ty,
            name: concat!("matmul/", $stem, "_fma"),
            coopmat: None,
            columns: None,
            unpack: None,
            matvec: None,
            input: MatmulInput::F32,
        }
    };
}

/// Every matmul kernel brass has: one per quant type over its dot4 matvec's weights,
/// and one per type over the GGUF rows of its other matvecs.
pub const MATMUL_KERNELS: &[MatmulKernel] = &[
    matmul!(F32, "f32", fma),
    matmul!(F16, "f16", fma),
    matmul!(Q8_0, "q8_0"),
    matmul!(Q4_0, "q4_0"),
    matmul!(Q4_1, "q4_1"),
    matmul!(Q5_0, "q5_0"),
    matmul!(Q5_1, "q5_1"),
    matmul!(Q4_K, "q4_k"),
    matmul!(Q5_K, "q5_k"),
    matmul!(Q6_K, "q6_k"),
    matmul!(Q8_0, "q8_0", fma),
    matmul!(Q4_0, "q4_0", fma),
    matmul!(Q4_1, "q4_1", fma),
    matmul!(Q5_0, "q5_0", fma),
    matmul!(Q5_1, "q5_1", fma),
    matmul!(Q4_K, "q4_k", fma),
    matmul!(Q5_K, "q5_k", fma),
    matmul!(Q6_K, "q6_k", fma),
];

/// How a matmul multiplies: int8 on dot4I8Packed, or the weights' and x's values on
/// the adapter's cooperative matrices (the engines over the dot4 matvecs' weights,
/// which the router picks between), or, over GGUF rows, f32 multiply-adds (f32
/// accumulators all).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MatmulEngine {
    /// int8 x and weights on dot4I8Packed (`matmul/dot4.wgsl`).
    Dot4 {
        /// Groups of 32 staged per K step.
        k_groups: u32,
    },
    /// The weights' and x's values on the adapter's cooperative matrices
    /// (`matmul/coopmat.wgsl`).
    CoopMatrix {
        /// The cooperative-matrix shape multiplied on.
        shape: CoopMatrix,
        /// Workgroups are [`COOP_SUBGROUPS`] subgroups of this (the adapter's largest) size.
        subgroup_max: u32,
        /// Groups of 32 staged per K step.
        k_groups: u32,
    },
    /// A decode step's rows (a token per sequence) on the adapter's cooperative matrices
    /// (`matmul/columns.wgsl`): [`COOP_SUBGROUPS`] subgroups take `row_blocks` blocks
    /// of S rows by `token_blocks` blocks of S tokens, the K parts summed in a fixed
    /// order, so that a token's outputs do not depend on the others.
    CoopColumns {
        /// The cooperative-matrix shape multiplied on.
        shape: CoopMatrix,
        /// Workgroups are [`COOP_SUBGROUPS`] subgroups of this (the adapter's largest) size.
        subgroup_max: u32,
        /// Groups of 32 staged per K step.
        k_groups: u32,
        /// Blocks of S rows per workgroup: 1, 2, 4 or 8.
        row_blocks: u32,
        /// Blocks of S tokens per workgroup: 1 or 2.
        token_blocks: u32,
        /// Parts each round's K is summed in, a token's sums over them added in part
        /// order: `8 / row_blocks` (a part a subgroup) or twice that (two). A token's
        /// bits depend on the parts, not on the row blocks: a tile of twice the row
        /// blocks in the same parts gives the same bits.
        k_parts: u32,
        /// Spans K's rounds are split in over workgroups, 1 or more: with more, each
        /// span's sums go to a scratch buffer and a second dispatch
        /// (`matmul/span_sum.wgsl`) adds them in span order
        /// ([`MatmulLaunch::dispatches_with_spans`]).
        k_spans: u32,
    },
    /// Weights decoded to f32 from GGUF rows and f32 x, f32 multiply-adds over tiles of
    /// [`FMA_TILE`], [`FMA_K_STEP`] per K step: what [`MatmulLaunch::of`] gives every
    /// matrix whose matvec is not dot4, whichever engine was routed for the dot4 ones
    /// (the router's `route_matmul_engine`).
    Fma,
}

impl MatmulEngine {
    /// dot4 with as many groups per K step as the workgroup memory holds, up to 4.
    pub fn dot4(profile: &DeviceProfile) -> Result<MatmulEngine> {
        let fits = profile.workgroup_storage_bytes as u64 / WORKGROUP_BYTES_PER_GROUP;
        let k_groups = [4u32, 2, 1]
            .into_iter()
            .find(|&g| g as u64 <= fits)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "a matmul tile needs {WORKGROUP_BYTES_PER_GROUP} bytes of workgroup memory, \
                     the device has {}",
                    profile.workgroup_storage_bytes
                ))
            })?;
        Ok(MatmulEngine::Dot4 { k_groups })
    }

    /// The decode-columns engine of `row_blocks` blocks of rows, `token_blocks` of
    /// tokens and `k_groups` groups per K step on `profile`, a part of K a subgroup
    /// (`8 / row_blocks` parts), or None where it cannot run there: no cooperative
    /// matrix shape or subgroups, a workgroup past the invocation or memory limits,
    /// `row_blocks` not 1, 2, 4 or 8, `token_blocks` not 1 or 2, or K parts
    /// (`k_groups * 32 / (8 / row_blocks)` values) that are not whole matrices.
    pub fn coop_columns(
        profile: &DeviceProfile,
        row_blocks: u32,
        token_blocks: u32,
        k_groups: u32,
    ) -> Option<MatmulEngine> {
        let shape = profile.coop_matrix?;
        let k_parts = COOP_SUBGROUPS.checked_div(row_blocks)?;
        let fits = profile.subgroups
            && [1, 2, 4, 8].contains(&row_blocks)
            && [1, 2].contains(&token_blocks)
            && k_groups > 0
            && COOP_SUBGROUPS * profile.subgroup_max <= profile.max_invocations_per_workgroup
            && columns_workgroup_bytes(shape, k_groups, row_blocks, token_blocks)
                <= profile.workgroup_storage_bytes as u64;
        let engine = MatmulEngine::CoopColumns {
            shape,
            subgroup_max: profile.subgroup_max,
            k_groups,
            row_blocks,
            token_blocks,
            k_parts,
            k_spans: 1,
        };
        fits.then_some(engine)?.in_k_parts(k_parts)
    }

    /// The decode columns summing each round's K in `k_parts` parts: `8 / row_blocks`
    /// (a part a subgroup) or twice that (two a subgroup), each a whole number of
    /// matrices. None for other counts or engines.
    pub fn in_k_parts(mut self, k_parts: u32) -> Option<MatmulEngine> {
        let MatmulEngine::CoopColumns {
            shape,
            k_groups,
            row_blocks,
            k_parts: parts,
            ..
        } = &mut self
        else {
            return None;
        };
        let spread = COOP_SUBGROUPS / *row_blocks;
        let whole = k_parts > 0 && (32 * *k_groups).is_multiple_of(k_parts * shape.size);
        if !(whole && (k_parts == spread || k_parts == 2 * spread)) {
            return None;
        }
        *parts = k_parts;
        Some(self)
    }

    /// Parts each round's K is summed in: the decode columns' `k_parts`, else 1.
    pub fn k_parts(&self) -> u32 {
        match *self {
            MatmulEngine::CoopColumns { k_parts, .. } => k_parts,
            _ => 1,
        }
    }

    /// The decode columns with K's rounds split in `k_spans` spans (at least 1); any
    /// other engine unchanged.
    pub fn in_k_spans(mut self, k_spans: u32) -> MatmulEngine {
        if let MatmulEngine::CoopColumns { k_spans: spans, .. } = &mut self {
            *spans = k_spans.max(1);
        }
        self
    }

    /// Spans K is split in over workgroups: 1 but for the decode columns'
    /// [`in_k_spans`](Self::in_k_spans).
    pub fn k_spans(&self) -> u32 {
        match *self {
            MatmulEngine::CoopColumns { k_spans, .. } => k_spans,
            _ => 1,
        }
    }

    /// Rows of a workgroup's tile.
    pub fn tile(&self) -> u64 {
        match *self {
            MatmulEngine::Dot4 { .. } => DOT4_TILE,
            MatmulEngine::CoopMatrix { shape, .. } => coop_tile(shape),
            MatmulEngine::CoopColumns {
                shape, row_blocks, ..
            } => row_blocks as u64 * shape.size as u64,
            MatmulEngine::Fma => FMA_TILE,
        }
    }

    /// Tokens of a workgroup's tile.
    pub fn token_tile(&self) -> u64 {
        match *self {
            MatmulEngine::CoopColumns {
                shape,
                token_blocks,
                ..
            } => token_blocks as u64 * shape.size as u64,
            engine => engine.tile(),
        }
    }

    /// Groups of 32 staged per K step; 0 for [`MatmulEngine::Fma`], whose step
    /// ([`FMA_K_STEP`]) is not whole groups.
    pub fn k_groups(&self) -> u32 {
        match *self {
            MatmulEngine::Dot4 { k_groups }
            | MatmulEngine::CoopMatrix { k_groups, .. }
            | MatmulEngine::CoopColumns { k_groups, .. } => k_groups,
            MatmulEngine::Fma => 0,
        }
    }

    /// Weights per row staged per K step.
    pub fn k_step(&self) -> u32 {
        match *self {
            MatmulEngine::Fma => FMA_K_STEP,
            engine => 32 * engine.k_groups(),
        }
    }
}

/// Subgroups of a cooperative-matrix workgroup.
pub const COOP_SUBGROUPS: u32 = 8;

/// Rows (and tokens) of a cooperative-matrix tile: 2 x 4 subgroups of 4 x 2 matrices.
fn coop_tile(shape: CoopMatrix) -> u64 {
    8 * shape.size as u64
}

/// A cooperative-matrix workgroup's memory: the tile's weights and x staged as the
/// input type (rows padded by 8 elements), and each subgroup's f32 matrix going out.
pub fn coop_workgroup_bytes(shape: CoopMatrix, k_groups: u32) -> u64 {
    let size = shape.size as u64;
    let tile = coop_tile(shape);
    let ld = 32 * k_groups as u64 + 8;
    2 * tile * ld * shape.input.bytes() + COOP_SUBGROUPS as u64 * size * size * 4
}

/// A decode-columns workgroup's memory: `row_blocks` blocks of S rows and
/// `token_blocks` of S tokens staged as the input type (rows padded by 8 elements),
/// and each subgroup's f32 accumulators going out.
pub fn columns_workgroup_bytes(
    shape: CoopMatrix,
    k_groups: u32,
    row_blocks: u32,
    token_blocks: u32,
) -> u64 {
    let size = shape.size as u64;
    let ld = 32 * k_groups as u64 + 8;
    (row_blocks + token_blocks) as u64 * size * ld * shape.input.bytes()
        + (COOP_SUBGROUPS * token_blocks) as u64 * size * size * 4
}

/// What every kernel on cooperative matrices of `shape` is composed with (the matmuls,
/// the matrix probe): its `enable` directives, and S, CT (the multiplied type) and the
/// matrix types MatA, MatB and MatC (f32 accumulators).
pub fn coop_preamble(shape: CoopMatrix) -> (Vec<&'static str>, Vec<WgslConst>) {
    let enables = match shape.input {
        CoopInput::F16 => vec!["f16", "wgpu_cooperative_matrix"],
        CoopInput::F32 => vec!["wgpu_cooperative_matrix"],
    };
    let consts = vec![
        WgslConst::u32("S", shape.size),
        WgslConst::alias("CT", shape.input.wgsl()),
        WgslConst::alias("MatA", coop_type(shape, 'A')),
        WgslConst::alias("MatB", coop_type(shape, 'B')),
        WgslConst::alias("MatC", coop_type(shape, 'C')),
    ];
    (enables, consts)
}

/// The constants of every matmul on cooperative matrices: the preamble's, the staging
/// its matrix loads allow (`CoopMatrix::vector_loads`), its subgroups' size and its
/// groups per K step.
fn coop_constants(shape: CoopMatrix, subgroup_max: u32, k_groups: u32) -> Vec<WgslConst> {
    let mut consts = coop_preamble(shape).1;
    consts.push(if shape.vector_loads {
        WgslConst::include("STAGED", "matmul/staged_vec4.wgsl")
    } else {
        WgslConst::include("STAGED", "matmul/staged_scalar.wgsl")
    });
    consts.push(WgslConst::u32("SUBGROUP_MAX", subgroup_max));
    consts.push(WgslConst::u32("K_GROUPS", k_groups));
    consts
}

/// The pipeline key of kernel `name` on cooperative matrices, as far as every such
/// engine shares it.
fn coop_key(name: &str, shape: CoopMatrix, subgroup_max: u32, k_groups: u32) -> String {
    format!(
        "{name} {shape}{} wg{} k_groups{k_groups}",
        // Four values a store unless named (`coop_constants`).
        if shape.vector_loads {
            ""
        } else {
            " scalar_staging"
        },
        COOP_SUBGROUPS * subgroup_max
    )
}

/// `coop_mat<S>x<S><T, role>` for the shapes [`CoopMatrix::pick`] allows.
fn coop_type(shape: CoopMatrix, role: char) -> &'static str {
    match (shape.size, shape.input, role) {
        (16, CoopInput::F16, 'A') => "coop_mat16x16<f16, A>",
        (16, CoopInput::F16, 'B') => "coop_mat16x16<f16, B>",
        (16, CoopInput::F32, 'A') => "coop_mat16x16<f32, A>",
        (16, CoopInput::F32, 'B') => "coop_mat16x16<f32, B>",
        (16, _, _) => "coop_mat16x16<f32, C>",
        (_, CoopInput::F16, 'A') => "coop_mat8x8<f16, A>",
        (_, CoopInput::F16, 'B') => "coop_mat8x8<f16, B>",
        (_, CoopInput::F32, 'A') => "coop_mat8x8<f32, A>",
        (_, CoopInput::F32, 'B') => "coop_mat8x8<f32, B>",
        _ => "coop_mat8x8<f32, C>",
    }
}

/// The matmul that reads the weights `matvec` uploads, if there is one: a dot4
/// matvec's own, and its type's fma matmul for any other matvec that keeps the GGUF
/// rows. (A dot4 matvec may keep them too, Q8_0's and Q4_0's do, but its matmul takes
/// x as it does, in int8.)
pub fn for_matvec(matvec: &MatvecKernel) -> Option<&'static MatmulKernel> {
    MATMUL_KERNELS.iter().find(|k| match k.matvec {
        Some(name) => name == matvec.name,
        None => k.ty == matvec.ty && matvec.family != Family::Dot4 && matvec.layout == Layout::Gguf,
    })
}

/// One dispatch's rows: a weight part of the matvec, in its own binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MatmulPart {
    /// The part's first row of the matrix.
    pub first_row: u64,
    /// Rows in the part.
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
    engine: MatmulEngine,
}

/// A matvec's row parts as a matmul over its weights takes them.
fn parts_of(matvec: &MatvecLaunch) -> Vec<MatmulPart> {
    matvec
        .parts()
        .iter()
        .map(|p| MatmulPart {
            first_row: p.first_row,
            rows: p.rows,
        })
        .collect()
}

fn kernel_name<S: serde::Serializer>(k: &&'static MatmulKernel, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.name)
}

impl MatmulLaunch {
    /// The matmul over `matvec`'s weights (same parts, same layout): over a dot4
    /// matvec's, on `engine` (from [`crate::router::route_matmul_engine`]); over any
    /// other matvec's GGUF rows (the exact route, F32 and F16), the fma kernel on
    /// [`MatmulEngine::Fma`] whatever `engine` is. An error names why there is none: a
    /// matvec whose layout no matmul reads, or the fma engine asked of a dot4 matvec's
    /// weights.
    pub fn of(matvec: &MatvecLaunch, engine: MatmulEngine) -> Result<MatmulLaunch> {
        let mv = matvec.kernel();
        let kernel = for_matvec(mv).ok_or_else(|| {
            Error::Invalid(format!(
                "{}: no matmul kernel for {} weights laid out as {:?}",
                mv.name, mv.ty, mv.layout
            ))
        })?;
        let engine = match (kernel.input, engine) {
            (MatmulInput::F32, _) => MatmulEngine::Fma,
            (MatmulInput::Q8, MatmulEngine::Fma) => {
                return Err(Error::Invalid(format!(
                    "{}: the fma engine reads GGUF rows with f32 x, not a dot4 matvec's \
                     weights with int8 x",
                    mv.name
                )))
            }
            (MatmulInput::Q8, engine) => engine,
        };
        Ok(MatmulLaunch {
            kernel,
            m: matvec.m(),
            k: matvec.k(),
            row_bytes: matvec.row_bytes(),
            parts: parts_of(matvec),
            engine,
        })
    }

    /// The kernel, whichever of its files the engine runs ([`MatmulLaunch::kernel_name`]).
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

    /// The row parts, one binding and dispatch each, as the matvec's.
    pub fn parts(&self) -> &[MatmulPart] {
        &self.parts
    }

    /// How it multiplies.
    pub fn engine(&self) -> MatmulEngine {
        self.engine
    }

    /// The WGSL file (`matmul/<type>_dot4`, `_coopmat`, `_columns` or `_fma`).
    pub fn kernel_name(&self) -> &'static str {
        match (self.engine, self.kernel.coopmat, self.kernel.columns) {
            (MatmulEngine::CoopMatrix { .. }, Some(coopmat), _) => coopmat,
            (MatmulEngine::CoopColumns { .. }, _, Some(columns)) => columns,
            // `of` pairs a kernel without cooperative matrices with Fma only.
            _ => self.kernel.name,
        }
    }

    /// The form x must arrive in.
    pub fn input(&self) -> MatmulInput {
        self.kernel.input
    }

    /// Bytes of x per token: [`Q8_GROUP_BYTES`] per 32 values quantized, or 4 per f32.
    pub fn x_bytes_per_token(&self) -> u64 {
        match self.input() {
            MatmulInput::Q8 => self.k / 32 * Q8_GROUP_BYTES,
            MatmulInput::F32 => self.k * 4,
        }
    }

    /// The alignment of a token's x (bytes), which is also the unit the kernel counts
    /// the stride in: its `vec4<f32>` for q8 groups, its `f32` for floats.
    fn x_align(&self) -> u64 {
        match self.input() {
            MatmulInput::Q8 => 16,
            MatmulInput::F32 => 4,
        }
    }

    /// Multiply-adds times two for `n_tokens` tokens.
    pub fn flops(&self, n_tokens: u64) -> u64 {
        2 * self.m * self.k * n_tokens
    }

    /// The `enable` directives its WGSL needs.
    pub fn enables(&self) -> Vec<&'static str> {
        match self.engine {
            MatmulEngine::Dot4 { .. } | MatmulEngine::Fma => vec![],
            MatmulEngine::CoopMatrix { shape, .. } | MatmulEngine::CoopColumns { shape, .. } => {
                coop_preamble(shape).0
            }
        }
    }

    /// The constants its WGSL is composed with.
    pub fn constants(&self) -> Vec<WgslConst> {
        match self.engine {
            MatmulEngine::Dot4 { k_groups } => vec![WgslConst::u32("K_GROUPS", k_groups)],
            MatmulEngine::CoopMatrix {
                shape,
                subgroup_max,
                k_groups,
            } => coop_constants(shape, subgroup_max, k_groups),
            MatmulEngine::CoopColumns {
                shape,
                subgroup_max,
                k_groups,
                row_blocks,
                token_blocks,
                k_parts,
                k_spans,
            } => {
                let mut consts = coop_constants(shape, subgroup_max, k_groups);
                consts.push(WgslConst::u32("ROW_BLOCKS", row_blocks));
                consts.push(WgslConst::u32("TOKEN_BLOCKS", token_blocks));
                consts.push(WgslConst::u32("K_PARTS", k_parts));
                consts.push(WgslConst::u32("K_SPANS", k_spans));
                consts
            }
            MatmulEngine::Fma => vec![WgslConst::u32("K_STEP", FMA_K_STEP)],
        }
    }

    /// The pipeline's ledger name: the kernel and its configuration.
    pub fn pipeline_key(&self) -> String {
        let name = self.kernel_name();
        match self.engine {
            MatmulEngine::Dot4 { k_groups } => format!("{name} k_groups{k_groups}"),
            MatmulEngine::CoopMatrix {
                shape,
                subgroup_max,
                k_groups,
            } => coop_key(name, shape, subgroup_max, k_groups),
            MatmulEngine::CoopColumns {
                shape,
                subgroup_max,
                k_groups,
                row_blocks,
                token_blocks,
                k_parts,
                k_spans,
            } => format!(
                "{} rows{row_blocks}x{size} tokens{token_blocks}x{size}{}{}",
                coop_key(name, shape, subgroup_max, k_groups),
                // Two parts a subgroup; one is the parts the row blocks make.
                if k_parts != COOP_SUBGROUPS / row_blocks {
                    format!(" k_parts{k_parts}")
                } else {
                    String::new()
                },
                if k_spans > 1 {
                    format!(" k_spans{k_spans}")
                } else {
                    String::new()
                },
                size = shape.size
            ),
            MatmulEngine::Fma => format!("{name} k_step{FMA_K_STEP}"),
        }
    }

    /// The complete WGSL.
    pub fn source(&self) -> Result<String> {
        compose(
            &format!("{}.wgsl", self.kernel_name()),
            &self.enables(),
            &self.constants(),
        )
    }

    /// Its pipeline's bindings and parameter block.
    pub fn template(&self) -> PipelineTemplate {
        PipelineTemplate {
            params_bytes: PARAMS_BYTES,
            storage: STORAGE,
            fallback_reason: None,
            index_checks: match self.engine {
                MatmulEngine::CoopMatrix { .. } | MatmulEngine::CoopColumns { .. } => {
                    IndexChecks::Kernel
                }
                MatmulEngine::Dot4 { .. } | MatmulEngine::Fma => IndexChecks::Wgpu,
            },
        }
    }

    /// The pipeline, created on first use.
    pub fn pipeline(&self, device: &dyn Device, cache: &PipelineCache) -> Result<PipelineId> {
        cache.get_or_create(device, &self.pipeline_key(), || {
            Ok((self.source()?, self.template()))
        })
    }

    /// The dispatches computing `y[t * y_stride + y_first + i] = (W·x_t)[i]` for the
    /// `n_tokens` tokens t, one per row part; an error for an engine in K spans, which
    /// needs [`dispatches_with_spans`](Self::dispatches_with_spans)' scratch.
    ///
    /// `weights[i]` holds the rows of part i as the matvec uploaded them; token t's x
    /// ([`input`](Self::input)) starts at byte `t * x_stride` of `x` (a multiple of 16
    /// for q8, of 4 for f32); `y_first` and `y_stride` are in elements.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatches(
        &self,
        pipeline: PipelineId,
        weights: &[Slice],
        x: Slice,
        x_stride: u64,
        y: Slice,
        y_place: (u64, u64),
        n_tokens: u64,
    ) -> Result<Vec<Dispatch>> {
        self.dispatches_with_spans(pipeline, weights, x, x_stride, y, y_place, n_tokens, None)
    }

    /// Bytes of scratch the K spans of `n_tokens` tokens need: every span's sums of the
    /// largest row part.
    pub fn span_scratch_bytes(&self, n_tokens: u64) -> u64 {
        let rows = self.parts.iter().map(|p| p.rows).max().unwrap_or(0);
        span_scratch_bytes(self.engine.k_spans(), n_tokens, rows)
    }

    /// [`dispatches`](Self::dispatches), and for the decode columns in K spans
    /// (`spans` given; an error without it): per row part the spans' sums into
    /// `spans.scratch`, then their sum in span order into y.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatches_with_spans(
        &self,
        pipeline: PipelineId,
        weights: &[Slice],
        x: Slice,
        x_stride: u64,
        y: Slice,
        (y_first, y_stride): (u64, u64),
        n_tokens: u64,
        spans: Option<SpanScratch>,
    ) -> Result<Vec<Dispatch>> {
        if self.parts.len() != weights.len() {
            return Err(Error::Invalid(format!(
                "{} weight bindings for {} row parts",
                weights.len(),
                self.parts.len()
            )));
        }
        let k_spans = self.engine.k_spans();
        match spans {
            None if k_spans > 1 => {
                return Err(Error::Invalid(format!(
                    "{} sums K in {k_spans} spans, which need a scratch buffer",
                    self.pipeline_key()
                )))
            }
            Some(s) if s.scratch.size < self.span_scratch_bytes(n_tokens) => {
                return Err(Error::Invalid(format!(
                    "matmul K spans: {} bytes of scratch for {n_tokens} tokens, which need {}",
                    s.scratch.size,
                    self.span_scratch_bytes(n_tokens)
                )))
            }
            _ => {}
        }
        let x_need = n_tokens.saturating_sub(1) * x_stride + self.x_bytes_per_token();
        let y_need = (n_tokens.saturating_sub(1) * y_stride + y_first + self.m) * 4;
        let x_align = self.x_align();
        if !x_stride.is_multiple_of(x_align)
            || x_stride < self.x_bytes_per_token()
            || x.size < x_need
        {
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
        let tile = self.engine.tile();
        let token_tiles = u32_of(n_tokens.div_ceil(self.engine.token_tile()), "token tiles")?;
        let mut out = Vec::with_capacity(self.parts.len() * if spans.is_some() { 2 } else { 1 });
        for (p, w) in self.parts.iter().zip(weights) {
            // In spans, span s's token t of this part at row s * n_tokens + t of the
            // scratch, rows of the part's length.
            let (into, first, stride) = match spans {
                Some(s) => (s.scratch, 0, p.rows),
                None => (y, y_first + p.first_row, y_stride),
            };
            out.push(Dispatch {
                pipeline,
                params: vec![
                    u32_of(p.rows, "rows")?,
                    u32_of(self.k, "K")?,
                    u32_of(self.row_bytes, "row bytes")?,
                    u32_of(first, "first output")?,
                    u32_of(n_tokens, "tokens")?,
                    u32_of(x_stride / x_align, "x stride")?,
                    u32_of(stride, "y stride")?,
                    0,
                ],
                storage: vec![*w, x, into],
                workgroups: [
                    token_tiles,
                    u32_of(p.rows.div_ceil(tile), "row tiles")?,
                    k_spans,
                ],
                bytes_read: p.rows * self.row_bytes + n_tokens * self.x_bytes_per_token(),
            });
            if let Some(s) = spans {
                let outputs = p.rows * n_tokens;
                out.push(Dispatch {
                    pipeline: s.sum,
                    params: vec![
                        u32_of(p.rows, "rows")?,
                        u32_of(n_tokens, "tokens")?,
                        k_spans,
                        u32_of(y_first + p.first_row, "first output")?,
                        u32_of(y_stride, "y stride")?,
                        0,
                        0,
                        0,
                    ],
                    storage: vec![s.scratch, y],
                    workgroups: [
                        u32_of(
                            outputs.div_ceil(SPAN_SUM_WG).min(MAX_WORKGROUPS),
                            "span sums",
                        )?,
                        1,
                        1,
                    ],
                    bytes_read: outputs * k_spans as u64 * 4,
                });
            }
        }
        Ok(out)
    }
}

/// Bytes of scratch `k_spans` spans of sums take for `n_tokens` tokens of a part of
/// `rows` rows: f32, span s's token t at row s * n_tokens + t (`matmul/columns.wgsl`).
pub fn span_scratch_bytes(k_spans: u32, n_tokens: u64, rows: u64) -> u64 {
    k_spans as u64 * n_tokens * rows * 4
}

/// Where the decode columns' K spans go before they are summed
/// ([`MatmulLaunch::dispatches_with_spans`]).
#[derive(Clone, Copy, Debug)]
pub struct SpanScratch {
    /// At least [`MatmulLaunch::span_scratch_bytes`] of the step's tokens.
    pub scratch: Slice,
    /// [`span_sum_pipeline`]'s.
    pub sum: PipelineId,
}

/// Invocations of a span-sum workgroup (`matmul/span_sum.wgsl`'s WG).
const SPAN_SUM_WG: u64 = 256;
/// Workgroups of a span-sum dispatch at most: it loops over the rest.
const MAX_WORKGROUPS: u64 = 65_535;
const SPAN_SUM_NAME: &str = "matmul/span_sum";

/// The span sum's (ledger name, WGSL): one pipeline serves every matrix.
pub fn span_sum_source() -> Result<(String, String)> {
    Ok((
        SPAN_SUM_NAME.to_string(),
        compose("matmul/span_sum.wgsl", &[], &[])?,
    ))
}

/// The pipeline adding the decode columns' K spans in span order, created on first use.
pub fn span_sum_pipeline(device: &dyn Device, cache: &PipelineCache) -> Result<PipelineId> {
    cache.get_or_create(device, SPAN_SUM_NAME, || {
        Ok((
            span_sum_source()?.1,
            PipelineTemplate {
                params_bytes: PARAMS_BYTES,
                storage: &[Access::Read, Access::ReadWrite],
                fallback_reason: None,
                index_checks: IndexChecks::Wgpu,
            },
        ))
    })
}

/// Every matmul kernel as (name, complete WGSL) in its canonical configurations: dot4
/// with two groups per K step; cooperative matrices 16x16 f16 (NVIDIA's, as
/// `<name>_16x16`) and 8x8 f16 (Metal's, `<name>_8x8`) with subgroups of 32, the decode
/// columns in the same two shapes with 4 groups per K step, 2 row blocks and 2 token
/// blocks; fma.
pub fn sources() -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for kernel in MATMUL_KERNELS {
        let launch = |engine| MatmulLaunch {
            kernel,
            m: 0,
            k: 0,
            row_bytes: 0,
            parts: Vec::new(),
            engine,
        };
        let Some(coopmat) = kernel.coopmat else {
            out.push((kernel.name.to_string(), launch(MatmulEngine::Fma).source()?));
            continue;
        };
        out.push((
            kernel.name.to_string(),
            launch(MatmulEngine::Dot4 { k_groups: 2 }).source()?,
        ));
        for size in [16, 8] {
            let shape = CoopMatrix::f16_as_offered(size);
            let engine = MatmulEngine::CoopMatrix {
                shape,
                subgroup_max: 32,
                k_groups: 2,
            };
            out.push((format!("{coopmat}_{size}x{size}"), launch(engine).source()?));
            let Some(columns) = kernel.columns else {
                continue;
            };
            let engine = MatmulEngine::CoopColumns {
                shape,
                subgroup_max: 32,
                k_groups: 4,
                row_blocks: 2,
                token_blocks: 2,
                k_parts: 4,
                k_spans: 1,
            };
            out.push((format!("{columns}_{size}x{size}"), launch(engine).source()?));
        }
    }
    out.extend(unpacked::sources()?);
    out.push(span_sum_source()?);
    Ok(out)
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

/// x as the decode columns read it (`matmul/columns.wgsl`), back to floats: both int8
/// planes, each value d * (256 q1 + q2) with d the two planes' scale.
pub fn dequantize_x_q8_planes(q8: &[u8], k: usize) -> Vec<f32> {
    let groups = q8.chunks_exact(Q8_GROUP_BYTES as usize).take(k / 32);
    groups
        .flat_map(|g| {
            let d = f32::from_le_bytes(g[80..84].try_into().expect("4 bytes"));
            (0..32).map(move |i| (256 * (g[i] as i8 as i32) + g[48 + i] as i8 as i32) as f32 * d)
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
    let x_bytes = k / 32 * Q8_GROUP_BYTES as usize;
    if x_q8.len() < n_tokens * x_bytes {
        return Err(Error::Invalid(format!(
            "matmul reference: {} x bytes for {n_tokens} tokens of {k} values",
            x_q8.len()
        )));
    }
    let xs: Vec<Vec<f32>> = (0..n_tokens)
        .map(|t| dequantize_x_q8(&x_q8[t * x_bytes..(t + 1) * x_bytes], k))
        .collect();
    reference_over(ty, weights, (m, k), &xs)
}

/// CPU reference for the fma kernels' f32 x (`x`, `n_tokens` runs of K values): ggml's
/// dequantization of each row times x, accumulated in f64.
pub fn cpu_reference_f32x(
    ty: GgmlType,
    weights: &[u8],
    (m, k): (usize, usize),
    x: &[f32],
    n_tokens: usize,
) -> Result<Vec<Vec<f32>>> {
    if x.len() < n_tokens * k {
        return Err(Error::Invalid(format!(
            "matmul reference: {} x values for {n_tokens} tokens of {k}",
            x.len()
        )));
    }
    let xs: Vec<Vec<f32>> = x
        .chunks_exact(k.max(1))
        .take(n_tokens)
        .map(<[f32]>::to_vec)
        .collect();
    reference_over(ty, weights, (m, k), &xs)
}

/// `y[t][row]` = ggml's dequantized row times `xs[t]`, in f64.
fn reference_over(
    ty: GgmlType,
    weights: &[u8],
    (m, k): (usize, usize),
    xs: &[Vec<f32>],
) -> Result<Vec<Vec<f32>>> {
    let row_bytes = ty
        .bytes_for(k as u64)
        .ok_or_else(|| Error::Invalid(format!("K = {k} is not a whole number of {ty} blocks")))?
        as usize;
    if weights.len() < m * row_bytes {
        return Err(Error::Invalid(format!(
            "matmul reference: {} weight bytes for {m} x {k} {ty}",
            weights.len()
        )));
    }
    let mut out = vec![vec![0f32; m]; xs.len()];
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
