//! Prompt processing's routes, made as decode's are, each a typed launch with the
//! clauses that decided it: matvec or matmul by token count, the matmul engine and each
//! matrix's matmul for a batch, the batch size, the prefill attention's tiles and key
//! passes, and the runs the prompt's logits are computed in.

use serde::Serialize;

use super::Clause;
use crate::device::DeviceProfile;
use crate::kernels::attention::{
    Heads, KvType, NoMatrixAttention, PrefillAttention, PrefillEngine, PREFILL_WORKGROUP_BYTES,
};
use crate::kernels::matmul::{
    coop_workgroup_bytes, MatmulEngine, MatmulInput, MatmulLaunch, UnpackedEngine, UnpackedMatmul,
    COOP_SUBGROUPS,
};
use crate::kernels::matvec::{Family, MatvecLaunch};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// How a forward pass multiplies a matrix by `n` tokens' x.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearKind {
    /// One token: the matrix's matvec, which reads every weight once for it.
    Matvec,
    /// Many: its matmul, which reads a tile of weights once for a tile of tokens.
    Matmul,
}

/// The one place that decides matvec or matmul: a matvec for one token, a matmul for
/// more (at two tokens a matmul already reads each weight once where two matvecs read
/// it twice).
pub fn linear_kind(n_tokens: u64) -> LinearKind {
    match n_tokens {
        0 | 1 => LinearKind::Matvec,
        _ => LinearKind::Matmul,
    }
}

/// The unpacked matmul's tile where a run asks for it, as (row parts, token blocks per
/// subgroup): 2 of its 8 subgroups along the rows, each 4 x 2 matrices, 128 x 128 at
/// S = 16, the coopmat tile's shape.
pub const UNPACKED_TILE: (u32, u32) = (2, 2);

/// The engine a batch's quant matrices multiply on, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineRoute {
    engine: MatmulEngine,
    /// Whether the run asked for cooperative matrices (every matrix then takes them).
    forced: bool,
    /// Where the run asked for it, the unpacked engine the matrices on cooperative
    /// matrices take in place of the tiled one.
    unpacked: Option<UnpackedEngine>,
    clauses: Vec<Clause>,
}

impl EngineRoute {
    /// The engine the dot4 quant matrices' matmuls multiply on.
    pub fn engine(&self) -> MatmulEngine {
        self.engine
    }

    /// The unpacked engine, where the run asked for it.
    pub fn unpacked(&self) -> Option<UnpackedEngine> {
        self.unpacked
    }

    /// The route with the matrices on cooperative matrices unpacked where `asked` says
    /// so ([`Overrides::unpacked_matmul`](super::Overrides::unpacked_matmul)); asked for
    /// where the route is not on cooperative matrices, a clear refusal.
    pub fn with_unpacked(self, profile: &DeviceProfile, asked: Option<bool>) -> Result<Self> {
        if asked != Some(true) {
            return Ok(EngineRoute {
                unpacked: None,
                ..self
            });
        }
        if !matches!(self.engine, MatmulEngine::CoopMatrix { .. }) {
            let why = self
                .clauses
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>();
            return Err(Error::Invalid(format!(
                "unpacked matmuls asked for, and the batch is not on cooperative matrices: {}",
                why.join("; ")
            )));
        }
        let unpacked = UnpackedEngine::on(profile, UNPACKED_TILE, true)?;
        Ok(EngineRoute {
            unpacked: Some(unpacked),
            ..self
        })
    }

    /// Why, in the order decided.
    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }
}

/// Why a batch's quant matrices are not on cooperative matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NoCoopMatrix {
    /// The run asked for dot4.
    Asked,
    /// The adapter offers no shape brass stages (f16 or f32 in, f32 out).
    NoShape,
    /// The adapter has no subgroups.
    NoSubgroups,
    /// [`COOP_SUBGROUPS`] subgroups of the adapter's largest size exceed a workgroup.
    TooManyInvocations {
        /// Invocations such a workgroup has.
        invocations: u32,
        /// The device's invocations per workgroup.
        limit: u32,
    },
    /// Even a tile staging one group per K step exceeds the workgroup memory.
    TileTooBig {
        /// Workgroup memory such a tile takes.
        bytes: u64,
        /// The device's workgroup memory, in bytes.
        limit: u32,
    },
}

/// Routes the batch's matmul engine: cooperative matrices where the adapter offers a
/// shape ([`crate::device::CoopMatrix::pick`]), has subgroups and the tile fits (with
/// as many groups per K step as fit, up to 4), unless `coop` says otherwise; else dot4.
/// Cooperative matrices asked for where the adapter has none is an error.
pub fn route_matmul_engine(profile: &DeviceProfile, coop: Option<bool>) -> Result<EngineRoute> {
    let coop_engine = || -> std::result::Result<MatmulEngine, NoCoopMatrix> {
        let shape = profile.coop_matrix.ok_or(NoCoopMatrix::NoShape)?;
        if !profile.subgroups {
            return Err(NoCoopMatrix::NoSubgroups);
        }
        let subgroup_max = profile.subgroup_max;
        let invocations = COOP_SUBGROUPS * subgroup_max;
        if invocations > profile.max_invocations_per_workgroup {
            return Err(NoCoopMatrix::TooManyInvocations {
                invocations,
                limit: profile.max_invocations_per_workgroup,
            });
        }
        let k_groups = [4u32, 2, 1]
            .into_iter()
            .find(|&g| coop_workgroup_bytes(shape, g) <= profile.workgroup_storage_bytes as u64)
            .ok_or(NoCoopMatrix::TileTooBig {
                bytes: coop_workgroup_bytes(shape, 1),
                limit: profile.workgroup_storage_bytes,
            })?;
        Ok(MatmulEngine::CoopMatrix {
            shape,
            subgroup_max,
            k_groups,
        })
    };
    let why = match (coop, coop_engine()) {
        (Some(false), _) => NoCoopMatrix::Asked,
        (wanted, Ok(engine)) => {
            let clause = Clause::MatmulCoopMatrix {
                shape: match engine {
                    MatmulEngine::CoopMatrix { shape, .. } => shape,
                    _ => unreachable!("coop_engine makes cooperative-matrix engines"),
                },
                k_groups: engine.k_groups(),
                min_tiles: profile.tuning.coop_min_workgroups,
                tile: engine.tile(),
                forced: wanted == Some(true),
            };
            return Ok(EngineRoute {
                engine,
                forced: wanted == Some(true),
                unpacked: None,
                clauses: vec![clause],
            });
        }
        (Some(true), Err(why)) => {
            return Err(Error::Invalid(format!(
                "cooperative matrices asked for: {}",
                Clause::MatmulDot4 { k_groups: 0, why }
            )))
        }
        (None, Err(why)) => why,
    };
    let engine = MatmulEngine::dot4(profile)?;
    Ok(EngineRoute {
        engine,
        forced: false,
        unpacked: None,
        clauses: vec![Clause::MatmulDot4 {
            k_groups: engine.k_groups(),
            why,
        }],
    })
}

/// How a batch multiplies a matrix: one tiled matmul (dot4, cooperative matrices or
/// fma), or unpacked (weights and x decoded into rows, then multiplied from memory).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum BatchLaunch {
    /// One dispatch per row part ([`MatmulLaunch`]).
    Tiled(MatmulLaunch),
    /// The weights' unpacking, x's and the multiply ([`UnpackedMatmul`]).
    Unpacked(UnpackedMatmul),
}

impl BatchLaunch {
    /// The tiled launch, if it is one.
    pub fn tiled(&self) -> Option<&MatmulLaunch> {
        match self {
            BatchLaunch::Tiled(launch) => Some(launch),
            BatchLaunch::Unpacked(_) => None,
        }
    }

    /// The multiplying kernel's WGSL file (`matmul/<type>_dot4`, `_coopmat`, `_fma` or
    /// `matmul/unpacked`).
    pub fn kernel_name(&self) -> &'static str {
        match self {
            BatchLaunch::Tiled(launch) => launch.kernel_name(),
            BatchLaunch::Unpacked(_) => "matmul/unpacked",
        }
    }

    /// The form x must arrive in: the unpacked matmul converts q8 x.
    pub fn input(&self) -> MatmulInput {
        match self {
            BatchLaunch::Tiled(launch) => launch.input(),
            BatchLaunch::Unpacked(_) => MatmulInput::Q8,
        }
    }

    /// The pipeline that multiplies, by its ledger name.
    pub fn pipeline_key(&self) -> String {
        match self {
            BatchLaunch::Tiled(launch) => launch.pipeline_key(),
            BatchLaunch::Unpacked(u) => {
                let [unpack, _, gemm] = u.pipeline_keys();
                format!("{gemm} over {unpack}")
            }
        }
    }

    /// The weights' type.
    pub fn ty(&self) -> GgmlType {
        match self {
            BatchLaunch::Tiled(launch) => launch.kernel().ty,
            BatchLaunch::Unpacked(u) => u.kernel().ty,
        }
    }

    /// Rows and columns of the matrix.
    pub fn shape(&self) -> (u64, u64) {
        match self {
            BatchLaunch::Tiled(launch) => (launch.m(), launch.k()),
            BatchLaunch::Unpacked(u) => (u.m(), u.k()),
        }
    }
}

/// A matrix's matmul for batches, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MatmulRoute {
    launch: BatchLaunch,
    clauses: Vec<Clause>,
}

impl MatmulRoute {
    /// The launch: tiled (kernel, row parts and engine) or unpacked.
    pub fn launch(&self) -> &BatchLaunch {
        &self.launch
    }

    /// Why, in the order decided.
    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }
}

/// Routes the matmul of the matrix whose matvec is `matvec`, for batches of `tokens`:
/// it reads the matvec's weights (no second copy). A dot4 matvec's matrix multiplies
/// on the routed engine, except that cooperative matrices (unless the run forced them)
/// go to dot4 on matrices a batch splits into fewer than
/// [`Tuning::coop_min_workgroups`](crate::device::Tuning::coop_min_workgroups) tiles,
/// which would leave the device idle. Float weights, and quant weights whose matvec
/// keeps x exact (the coop and scalar families), multiply f32 x on f32 FMAs. An error
/// says why a matrix has no matmul.
pub fn route_matmul(
    profile: &DeviceProfile,
    engine: &EngineRoute,
    matvec: &MatvecLaunch,
    tokens: u64,
) -> Result<MatmulRoute> {
    let ty = matvec.kernel().ty;
    let float = matches!(ty, GgmlType::F32 | GgmlType::F16);
    let family = matvec.family();
    let mut clauses = Vec::new();
    let chosen = if float {
        clauses.push(Clause::MatmulFloatWeights { ty });
        MatmulEngine::Fma
    } else if family != Family::Dot4 {
        clauses.push(Clause::MatmulExactX { family });
        MatmulEngine::Fma
    } else {
        match engine.engine {
            MatmulEngine::CoopMatrix { .. } if !engine.forced => {
                let tile = engine.engine.tile();
                let tiles = matvec.m().div_ceil(tile) * tokens.div_ceil(tile);
                let min = profile.tuning.coop_min_workgroups;
                if tiles < min {
                    let dot4 = MatmulEngine::dot4(profile)?;
                    clauses.push(Clause::MatmulCoopFewTiles {
                        tiles,
                        min,
                        k_groups: dot4.k_groups(),
                    });
                    dot4
                } else {
                    clauses.extend(engine.clauses.iter().cloned());
                    engine.engine
                }
            }
            routed => {
                clauses.extend(engine.clauses.iter().cloned());
                routed
            }
        }
    };
    let launch = MatmulLaunch::of(matvec, chosen)?;
    let launch = match (chosen, engine.unpacked) {
        (MatmulEngine::CoopMatrix { shape, .. }, Some(unpacked)) => {
            let u = UnpackedMatmul::of(matvec, unpacked)?;
            let scratch = (u.weight_scratch_bytes(), u.x_scratch_bytes(tokens));
            let binding = profile.usable_binding_bytes();
            if scratch.0.max(scratch.1) > binding {
                // A scratch one binding cannot hold: the tiled kernel, which needs none.
                clauses.push(Clause::MatmulUnpackedPastBinding { scratch, binding });
                BatchLaunch::Tiled(launch)
            } else {
                clauses.clear();
                clauses.push(Clause::MatmulUnpacked {
                    shape,
                    tile: (unpacked.tile_rows(), unpacked.tile_tokens()),
                    prefetch: unpacked.prefetch,
                    scratch,
                });
                BatchLaunch::Unpacked(u)
            }
        }
        _ => BatchLaunch::Tiled(launch),
    };
    if launch.input() == MatmulInput::Q8 {
        clauses.push(Clause::MatmulXQ8);
    }
    Ok(MatmulRoute { launch, clauses })
}

/// The prefill attention's launch, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PrefillAttentionRoute {
    launch: PrefillAttention,
    clauses: Vec<Clause>,
}

impl PrefillAttentionRoute {
    /// The launch: the kernel's tiles and key passes.
    pub fn launch(&self) -> &PrefillAttention {
        &self.launch
    }

    /// Why, in the order decided.
    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }
}

/// Routes the prefill attention: on the matrix units where the adapter has them and
/// neither `matrix` nor `coop` turns them off ([`PrefillAttention::on_matrix_units`]:
/// the tile that computes the head in the fewest slices, then the most rows; over an
/// f32 cache only where `matrix` asks, [`NoMatrixAttention::F32Cache`]; `keys`, the
/// context, bounds the walk a loop limit must allow);
/// else the scalar kernel with the most (token, query head) rows and the longest key
/// tile that fit the workgroup memory (up to [`PREFILL_WORKGROUP_BYTES`]), the head
/// sliced where one row does not fit, and the keys in passes where the device ends an
/// invocation's loops after a count.
pub fn route_prefill_attention(
    profile: &DeviceProfile,
    heads: Heads,
    (kv, keys): (KvType, u64),
    (coop, matrix): (Option<bool>, Option<bool>),
) -> Result<PrefillAttentionRoute> {
    let why = match (coop, matrix) {
        (Some(false), _) | (_, Some(false)) => NoMatrixAttention::Asked,
        (_, None) if kv == KvType::F32 => NoMatrixAttention::F32Cache,
        (_, None | Some(true)) => {
            match PrefillAttention::on_matrix_units(heads, kv, profile, keys)? {
                Ok(launch) => {
                    launch.check(profile)?;
                    let PrefillEngine::Matrix { shape, .. } = launch.engine() else {
                        unreachable!("on_matrix_units makes matrix launches");
                    };
                    let mut clauses = vec![Clause::PrefillAttentionOnMatrixUnits {
                        shape,
                        rows: launch.rows(),
                        key_tile: launch.key_tile(),
                        slices: launch.n_slices(),
                        bytes: launch.workgroup_bytes(),
                        budget: profile.workgroup_storage_bytes as u64,
                    }];
                    if let (Some(limit), Some(keys)) = (profile.loop_iterations, launch.max_keys())
                    {
                        clauses.push(Clause::PrefillMatrixWalkWithinLoopLimit {
                            limit,
                            keys,
                            iterations: launch.matrix_loop_iterations(keys),
                        });
                    }
                    return Ok(PrefillAttentionRoute { launch, clauses });
                }
                Err(why) => why,
            }
        }
    };
    let launch = PrefillAttention::new(heads, kv, profile)?;
    launch.check(profile)?;
    let mut clauses = vec![Clause::PrefillAttentionScalar { why }];
    clauses.push(Clause::PrefillAttentionTiles {
        rows: launch.rows(),
        key_tile: launch.key_tile(),
        slices: launch.n_slices(),
        bytes: launch.workgroup_bytes(),
        budget: (profile.workgroup_storage_bytes as u64).min(PREFILL_WORKGROUP_BYTES),
    });
    if let (Some(limit), Some(keys)) = (profile.loop_iterations, launch.keys_per_pass()) {
        clauses.push(Clause::PrefillKeyPasses { limit, keys });
    }
    Ok(PrefillAttentionRoute { launch, clauses })
}

/// Routes the batch size: the one asked for (default `default`), cut to what the
/// batch's widest buffer (`row_bytes` a token) lets a binding hold and to the context.
/// None, with its clause, where fewer than two tokens fit: prompts then go token at a
/// time.
pub fn route_batch(
    profile: &DeviceProfile,
    (asked, default): (Option<u64>, u64),
    row_bytes: u64,
    n_ctx: u64,
) -> (Option<u64>, Clause) {
    if asked == Some(1) {
        return (None, Clause::BatchOfOneAsked);
    }
    let wanted = asked.unwrap_or(default);
    let binding = profile.usable_binding_bytes();
    let by_binding = binding / row_bytes.max(1);
    let ubatch = wanted.min(by_binding).min(n_ctx);
    let clause = if ubatch == wanted {
        Clause::Batch {
            tokens: ubatch,
            asked: asked.is_some(),
        }
    } else if ubatch == by_binding {
        Clause::BatchByBinding {
            tokens: ubatch,
            wanted,
            row_bytes,
            binding,
        }
    } else {
        Clause::BatchByContext {
            tokens: ubatch,
            wanted,
        }
    };
    match ubatch {
        0 | 1 => (None, clause),
        _ => (Some(ubatch), clause),
    }
}
