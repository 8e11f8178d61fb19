//! The router: a pure function from a device profile, a matvec query (weight type, M,
//! K and the form x arrives in) and the run's overrides to a [`Route`]: a typed
//! [`MatvecLaunch`] and the [`Clause`]s that decided it, in order.
//!
//! Every predicate reads the profile (its limits and its measured [`Tuning`]), never a
//! model catalog: there is no shape cap. What does not fit on chip is tiled (K) or
//! split across bindings (rows). Overrides are inputs; nothing edits a route after.

mod attention;
mod clause;
mod prefill;
mod table;

pub use attention::{route_attention, AttentionQuery, AttentionRoute};
pub use clause::{Clause, Override};
pub use prefill::{
    linear_kind, route_batch, route_matmul, route_matmul_engine, route_prefill_attention,
    BatchLaunch, EngineRoute, LinearKind, MatmulRoute, NoCoopMatrix, PrefillAttentionRoute,
    UNPACKED_TILE,
};
pub use table::{write_route_table, RouteRow};

use serde::Serialize;

use crate::device::{DeviceProfile, Tuning};
use crate::kernels::attention::Merge;
use crate::kernels::matvec::{
    self, coop_rows_per_workgroup, dot4_rows_per_workgroup, Batches, CoopLaunch, Dot4Launch, Dot4X,
    Family, FloatX, LaunchConfig, MatvecKernel, MatvecLaunch, RowPart, StagedFrom, XStage,
    MAX_COLUMNS_AT_ONCE, SCALAR_ROWS_PER_WG,
};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// A per-run override for A/B comparisons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Force {
    /// Every matrix to this family's kernel for its type: an error where the family
    /// has none, but for dot4 on float weights, which takes coop.
    Family(Family),
    /// A kernel by name, e.g. `q4_k_coop` or `matvec/q4_k_coop`.
    Kernel(String),
}

impl std::str::FromStr for Force {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if let Some(f) = Family::parse(s) {
            return Ok(Force::Family(f));
        }
        matvec::find_by_name(s)
            .map(|k| Force::Kernel(k.name.to_string()))
            .ok_or_else(|| {
                let families: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
                let kernels: Vec<&str> = matvec::MATVEC_KERNELS
                    .iter()
                    .map(|k| k.name.trim_start_matches("matvec/"))
                    .collect();
                Error::Invalid(format!(
                    "no kernel or family named `{s}`: the families are {}; the kernels are {}",
                    families.join(", "),
                    kernels.join(", ")
                ))
            })
    }
}

/// A matvec `y[M] = W[M, K] · x[K]` to route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatvecQuery {
    /// The weights' type.
    pub ty: GgmlType,
    /// Rows of W: values of y.
    pub m: u64,
    /// Columns of W: values of x.
    pub k: u64,
    /// What the op before hands the matvec as x.
    pub x: XInput,
    /// Columns of x a step multiplies at most: the rows of a decode step, one per
    /// sequence the model serves (1 for one conversation).
    pub columns: u64,
}

/// What the op before a matvec hands it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum XInput {
    /// f32, from an op that writes nothing else (the attention output).
    F32,
    /// A norm's output: f32, and quantized as well where the route asks for it.
    Norm,
    /// gate, and up from element `up`, of one f32 binding: the matvec multiplies
    /// silu(gate) * up (the FFN's down projection), computing it while staging or
    /// taking it from its own dispatch.
    Glu {
        /// The element of the binding where up starts.
        up: u64,
    },
}

/// Choices a run makes for the router (`--force`, `--x-q8`, `--glu-q8`, the bench's
/// options): inputs, each named in the clauses of the routes it changes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// A family or kernel every matvec is routed to, in place of the rules.
    pub force: Option<Force>,
    /// Whether norms hand the dot4 matrices they feed x quantized: every one, none, or
    /// (None) those of at least [`Tuning::norm_q8_min_bytes`].
    pub x_q8: Option<bool>,
    /// Whether dot4 down projections take silu(gate) * up quantized by its own dispatch:
    /// every one, none, or (None) those of at least [`Tuning::glu_q8_min_bytes`].
    pub glu_q8: Option<bool>,
    /// Whether a dot4 route given quantized x reads it in place rather than staging a
    /// copy (None: where the kernel's lanes each read a whole 32-value group).
    pub x_in_place: Option<bool>,
    /// Columns (a step's rows) each loaded weight slice of a dot4 route that reads x in
    /// place is dotted with, 1 to [`MAX_COLUMNS_AT_ONCE`] (None: one). On the H200 8 at
    /// once ran 0.87-1.23x at 8 columns and 0.70x at one (`wgsl/matvec/dot4.wgsl`,
    /// `batch_rows`), so no rule takes it. For a route that stages x, the most columns
    /// it stages at once ([`Clause::StagedColumns`]).
    ///
    /// [`MAX_COLUMNS_AT_ONCE`]: crate::kernels::matvec::MAX_COLUMNS_AT_ONCE
    pub columns_at_once: Option<u32>,
    /// Whether the staging dot4 routes of a model of many sequences stage several of a
    /// step's columns at once ([`Clause::StagedColumns`]): None or yes where they fit,
    /// no (A/B) one at a time.
    pub staged_columns: Option<bool>,
    /// Whether staged columns ([`Clause::StagedColumns`]) with x in one tile load each
    /// lane's next weight slice ahead: None or yes, no (A/B) in a plain grid-stride
    /// loop. On the H100 ahead ran 722.8 tok/s at 8 sequences against 696.2
    /// (`results/parallel/staged_prefetch`).
    pub staged_prefetch: Option<bool>,
    /// Whether staged columns whose K holds fewer than the step's columns in one tile
    /// of all of K take them all at once, staged tile by tile: yes (A/B), or no (None:
    /// as many at once as one tile holds, each lane loading ahead; on the H100 tiles
    /// ran 703.9 tok/s at 8 sequences against 722.8, `results/parallel/staged_prefetch`).
    pub staged_tiles: Option<bool>,
    /// Invocations per coop and dot4 workgroup.
    pub workgroup_size: Option<u32>,
    /// dot4 lanes per row (0: a whole subgroup).
    pub lanes: Option<u32>,
    /// Workgroups per row part: as many as the row batches need, up to this many, in
    /// place of the rules that cap them.
    pub max_workgroups: Option<u32>,
    /// How staging dot4 workgroups take row batches.
    pub batches: Option<Batches>,
    /// Workgroups decode attention spreads a long context over, in place of
    /// [`Tuning::attention_workgroups`].
    pub attention_workgroups: Option<u64>,
    /// Positions a decode attention chunk takes at least, in place of the kernel's
    /// (A/B of the chunking rule).
    pub attention_min_chunk: Option<u64>,
    /// Invocations per subgroup decode attention workgroup, in place of
    /// [`DECODE_WG`](crate::kernels::attention::DECODE_WG) (A/B).
    pub attention_invocations: Option<u32>,
    /// How a split decode step merges its chunks, in place of the backend's rule.
    pub attention_merge: Option<Merge>,
    /// The int8 planes dot4 matvecs multiply x on (1 or 2; see
    /// [`Dot4Launch::planes`]), in place of one.
    pub x_planes: Option<u32>,
    /// Whether prefill matmuls multiply on cooperative matrices: yes (refused where the
    /// adapter has none), no (dot4), or (None) where the adapter has them
    /// ([`route_matmul_engine`]).
    pub coop_matrix: Option<bool>,
    /// Rows a decode step needs before its quant matrices multiply on the matrix units
    /// (A/B of the crossover), in place of
    /// [`DECODE_MATRIX_UNITS_FROM`](crate::model::DECODE_MATRIX_UNITS_FROM).
    pub decode_units_from: Option<u64>,
    /// Spans each decode-columns matrix sums K in over workgroups (A/B;
    /// `wgsl/matmul/columns.wgsl`'s K_SPANS), in place of
    /// [`DECODE_COLUMN_SPANS`](crate::model::DECODE_COLUMN_SPANS). Both tiles of a matrix
    /// take the same, so a row's sums stay the same in either.
    pub decode_column_spans: Option<u32>,
    /// Blocks of rows a decode-columns workgroup multiplies (A/B; 1, 2, 4 or 8,
    /// `wgsl/matmul/columns.wgsl`'s ROW_BLOCKS), in place of the plan's tiles (2 for
    /// steps of up to a block of tokens, 4 for more, both in 4 parts of K). Both tiles
    /// of a matrix take the same, in `8 / N` parts, so a row's sums stay the same in
    /// either; a count whose tile does not fit the adapter's workgroup memory is
    /// refused. On an H100 4 ran 14,336 x 4,096 at 32 rows in 136.7 µs against 163.5,
    /// and 4,096 x 4,096 in 76.7 against 49.5 (`results/parallel/columns_experiments`,
    /// section 6).
    pub decode_row_blocks: Option<u32>,
    /// Whether prompts' attention runs on the matrix units (`attention/flash`): yes
    /// where the adapter can run it (else the scalar kernel, and the clause says why),
    /// no, or (None) where the adapter can run it and the cache is not f32
    /// ([`NoMatrixAttention::F32Cache`]).
    ///
    /// [`NoMatrixAttention::F32Cache`]: crate::kernels::attention::NoMatrixAttention::F32Cache
    pub matrix_attention: Option<bool>,
    /// Whether a batch's quant matrices multiply unpacked (`matmul/unpacked.wgsl`:
    /// weights and x decoded once a batch into rows the matrix units load from memory)
    /// rather than tiled (`matmul/coopmat.wgsl`): yes where the adapter has matrix
    /// units (refused where not), or (None, no) not: measured on no device yet.
    pub unpacked_matmul: Option<bool>,
}

/// A matvec's launch and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Route {
    launch: MatvecLaunch,
    clauses: Vec<Clause>,
}

impl Route {
    /// The launch: kernel, row parts and launch choices.
    pub fn launch(&self) -> &MatvecLaunch {
        &self.launch
    }

    /// Why it is what it is, in the order decided.
    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }

    /// The kernel's family.
    pub fn family(&self) -> Family {
        self.launch.family()
    }

    /// The pipeline's ledger name: the kernel and the constants it is built with.
    pub fn pipeline_key(&self) -> String {
        self.launch.pipeline_key()
    }

    /// The clauses as one line, joined by `; `.
    pub fn reason(&self) -> String {
        let clauses: Vec<String> = self.clauses.iter().map(Clause::to_string).collect();
        clauses.join("; ")
    }
}

/// Routes a matvec.
pub fn route_matvec(
    profile: &DeviceProfile,
    query: &MatvecQuery,
    overrides: &Overrides,
) -> Result<Route> {
    let mut why = Vec::new();
    let kernel = kernel_for(profile, query.ty, overrides.force.as_ref(), &mut why)?;
    let rows = split_across_bindings(profile, query, &mut why)?;
    let (config, parts) = match kernel.family {
        Family::Scalar => (LaunchConfig::Scalar, scalar_parts(profile, &rows)),
        Family::Coop => coop_launch(profile, query, &rows, overrides, &mut why),
        Family::Dot4 => dot4_launch(profile, query, kernel, &rows, overrides, &mut why),
    };
    let launch = MatvecLaunch::new(profile, kernel, (query.m, query.k), parts, config)?;
    Ok(Route {
        launch,
        clauses: why,
    })
}

/// Whether the device runs the subgroup-cooperative families.
fn cooperative_fits(profile: &DeviceProfile) -> bool {
    profile.subgroups
        && profile.subgroup_min >= 4
        && profile.workgroup_storage_bytes as u64 >= TILE_QUANTUM * 2
        && profile.max_invocations_per_workgroup >= 64
}

/// Clause 1: the kernel. dot4 where the device runs it and the weights are quantized,
/// else coop, else scalar; or what the run forces.
fn kernel_for(
    profile: &DeviceProfile,
    ty: GgmlType,
    force: Option<&Force>,
    why: &mut Vec<Clause>,
) -> Result<&'static MatvecKernel> {
    let has = |f: Family| matvec::find(ty, f).is_some();
    if !has(Family::Scalar) && !has(Family::Coop) {
        return Err(Error::UnsupportedType(format!(
            "no matvec kernel for {ty} weights"
        )));
    }
    let fits = cooperative_fits(profile);
    let subgroups = (profile.subgroup_min, profile.subgroup_max);
    let workgroup_kib = profile.workgroup_storage_bytes / 1024;
    let family = match force {
        Some(Force::Family(Family::Dot4)) if !has(Family::Dot4) => {
            why.push(Clause::ForcedDot4HasNoKernel(ty));
            Family::Coop
        }
        Some(Force::Family(f)) => {
            why.push(Clause::ForcedFamily(*f));
            *f
        }
        Some(Force::Kernel(name)) => {
            let kernel = matvec::find_by_name(name)
                .ok_or_else(|| Error::Invalid(format!("no kernel named `{name}`")))?;
            if kernel.ty != ty {
                return Err(Error::Invalid(format!(
                    "forced kernel {name} cannot run {ty} weights"
                )));
            }
            why.push(Clause::ForcedKernel(kernel.name));
            kernel.family
        }
        None if fits && has(Family::Dot4) => {
            why.push(Clause::Dot4 {
                subgroups,
                workgroup_kib,
            });
            Family::Dot4
        }
        None if fits && has(Family::Coop) => {
            why.push(Clause::Coop {
                subgroups,
                workgroup_kib,
            });
            Family::Coop
        }
        None => {
            why.push(if !profile.subgroups {
                Clause::ScalarNoSubgroups
            } else if !has(Family::Coop) {
                Clause::ScalarNoCoopKernel(ty)
            } else {
                Clause::ScalarDeviceTooSmall
            });
            Family::Scalar
        }
    };
    if family.cooperative() && !fits {
        return Err(Error::Invalid(format!(
            "the {} family cannot run {ty} on {} (subgroups: {}, {} B workgroup memory)",
            family.name(),
            profile.name,
            profile.subgroups,
            profile.workgroup_storage_bytes
        )));
    }
    matvec::find(ty, family).ok_or_else(|| {
        Error::UnsupportedType(format!("no {} matvec kernel for {ty}", family.name()))
    })
}

/// A matrix's rows as the bindings hold them.
struct Rows {
    /// Bytes of one row of K weights.
    row_bytes: u64,
    /// (first row, rows) of each binding.
    parts: Vec<(u64, u64)>,
}

/// Clause 2: rows split across bindings where the tensor exceeds the binding limit.
fn split_across_bindings(
    profile: &DeviceProfile,
    q: &MatvecQuery,
    why: &mut Vec<Clause>,
) -> Result<Rows> {
    if q.m == 0 || q.k == 0 {
        return Err(Error::Invalid(format!("matvec of shape {} x {}", q.m, q.k)));
    }
    let row_bytes = q.ty.bytes_for(q.k).ok_or_else(|| {
        Error::UnsupportedType(format!(
            "{} needs K to be a multiple of {} (K = {})",
            q.ty,
            q.ty.block_size(),
            q.k
        ))
    })?;
    let limit = profile.usable_binding_bytes();
    if row_bytes > limit {
        return Err(Error::Invalid(format!(
            "one {} row of {} values ({row_bytes} bytes) exceeds {}'s {limit}-byte binding",
            q.ty, q.k, profile.name
        )));
    }
    let rows_per_part = (limit / row_bytes).min(q.m);
    let parts = q.m.div_ceil(rows_per_part);
    if parts > 1 {
        why.push(Clause::SplitAcrossBindings {
            bytes: q.m * row_bytes,
            limit,
            parts,
            rows_per_part,
        });
    }
    let parts = (0..parts)
        .map(|i| {
            let first = i * rows_per_part;
            (first, rows_per_part.min(q.m - first))
        })
        .collect();
    Ok(Rows { row_bytes, parts })
}

fn scalar_parts(profile: &DeviceProfile, rows: &Rows) -> Vec<RowPart> {
    let max_groups = profile.max_workgroups_per_dim.max(1) as u64;
    rows.parts
        .iter()
        .map(|&(first_row, rows)| {
            let groups = rows.div_ceil(SCALAR_ROWS_PER_WG);
            let x = groups.min(max_groups);
            RowPart {
                first_row,
                rows,
                workgroups: [x as u32, groups.div_ceil(x) as u32, 1],
            }
        })
        .collect()
}

/// Invocations per coop and dot4 workgroup: enough subgroups to share each staged x
/// tile.
const COOP_WG: u32 = 256;
/// The coop tile is a multiple of this, so of every block size (32 and 256).
const TILE_QUANTUM: u64 = 256;

fn workgroup_size(profile: &DeviceProfile, o: &Overrides, why: &mut Vec<Clause>) -> u32 {
    if let Some(wg) = o.workgroup_size {
        why.push(Clause::Override(Override::WorkgroupSize(wg)));
        return wg;
    }
    COOP_WG
        .min(profile.max_invocations_per_workgroup)
        .min(profile.max_workgroup_size_x)
}

/// Clause 3: the x tile, the largest multiple of the quantum up to K whose staging fits
/// in workgroup memory, for `columns` columns staged at once (one but for staged
/// columns, [`staged_columns_wanted`]).
fn x_tile(
    profile: &DeviceProfile,
    stage: XStage,
    k: u64,
    columns: u64,
    why: &mut Vec<Clause>,
) -> u32 {
    let storage = profile.workgroup_storage_bytes as u64;
    let fits = |t: u64| stage.columns_tile_bytes(t, columns) <= storage;
    let tile = (1..)
        .map(|n| n * TILE_QUANTUM)
        .take_while(|&t| t <= k.next_multiple_of(TILE_QUANTUM) && fits(t))
        .last()
        .unwrap_or(TILE_QUANTUM);
    let tiles = k.div_ceil(tile);
    let workgroup_kib = profile.workgroup_storage_bytes / 1024;
    why.push(if tiles == 1 {
        Clause::XStagedOnce {
            stage,
            bytes: stage.tile_bytes(tile),
            workgroup_kib,
        }
    } else {
        Clause::XTiles {
            stage,
            tiles,
            tile: tile as u32,
            workgroup_kib,
        }
    });
    tile as u32
}

/// One row per subgroup, x staged as f16 where the device has it.
///
/// The coop driver could pair rows (shared x reads, overlapped weight loads), but on
/// the H200 that won for Q4_1 and Q4_K heads (-13 %, -14 % time) and lost for Q8_0 (3x
/// slower) and Q6_K (+24 %): no route takes it.
fn coop_launch(
    profile: &DeviceProfile,
    q: &MatvecQuery,
    rows: &Rows,
    o: &Overrides,
    why: &mut Vec<Clause>,
) -> (LaunchConfig, Vec<RowPart>) {
    let x = if profile.f16 {
        FloatX::F16
    } else {
        FloatX::F32
    };
    let wg = workgroup_size(profile, o, why);
    let tile = x_tile(profile, x.stage(), q.k, 1, why);
    let rows_per_wg = coop_rows_per_workgroup(wg, profile.subgroup_max);
    let parts = rows
        .parts
        .iter()
        .map(|&(first_row, rows)| {
            let batches = rows.div_ceil(rows_per_wg);
            let mut groups = batches;
            if q.k <= tile as u64 {
                groups = groups.min(profile.tuning.persistent_workgroups);
            }
            part(profile, (first_row, rows), (batches, groups), o)
        })
        .collect();
    override_workgroups(o, why);
    (LaunchConfig::Coop(CoopLaunch { wg, tile, x }), parts)
}

/// A row part on `groups` workgroups within the device's limit; or with the override,
/// on as many as its `batches` row batches need, up to the override's count.
fn part(
    profile: &DeviceProfile,
    (first_row, rows): (u64, u64),
    (batches, groups): (u64, u64),
    o: &Overrides,
) -> RowPart {
    let groups = match o.max_workgroups {
        Some(n) => batches.min(n.max(1) as u64),
        None => groups,
    };
    let groups = groups.min(profile.max_workgroups_per_dim.max(1) as u64);
    RowPart {
        first_row,
        rows,
        workgroups: [groups as u32, 1, 1],
    }
}

fn override_workgroups(o: &Overrides, why: &mut Vec<Clause>) {
    if let Some(n) = o.max_workgroups {
        why.push(Clause::Override(Override::MaxWorkgroups(n)));
    }
}

fn dot4_launch(
    profile: &DeviceProfile,
    q: &MatvecQuery,
    kernel: &'static MatvecKernel,
    rows: &Rows,
    o: &Overrides,
    why: &mut Vec<Clause>,
) -> (LaunchConfig, Vec<RowPart>) {
    let wg = workgroup_size(profile, o, why);
    let sg = profile.subgroup_max;
    let Some(from) = dot4_x(profile, q, kernel, rows.row_bytes, o, why) else {
        // In place: all of K is one "tile", and each workgroup one batch.
        let lanes = dot4_lanes(profile, kernel, q.k, o, why);
        let rows_per_wg = dot4_rows_per_workgroup(wg, lanes, sg);
        why.push(Clause::ReadInPlace {
            rows_per_workgroup: rows_per_wg,
            forced: o.x_in_place.is_some(),
        });
        let parts = rows
            .parts
            .iter()
            .map(|&(first, n)| {
                let batches = n.div_ceil(rows_per_wg);
                part(profile, (first, n), (batches, batches), o)
            })
            .collect();
        override_workgroups(o, why);
        let config = Dot4Launch {
            wg,
            lanes,
            planes: x_planes(o, why),
            x: Dot4X::InPlace,
            columns_at_once: columns_at_once(kernel, o, why),
        };
        return (LaunchConfig::Dot4(config), parts);
    };
    let planes = x_planes(o, why);
    let stage = XStage::int8(planes);
    let tiled_columns = match o.staged_tiles {
        Some(true) => staged_columns_wanted(q, kernel, o),
        _ => 1,
    };
    let tile = x_tile(profile, stage, q.k, tiled_columns, why);
    let (columns, staged_batches) = staged_columns(profile, q, kernel, (tile, stage), o, why);
    let lanes = match columns > 1 {
        true => staged_team_lanes(profile, kernel, q.k.min(tile as u64), rows, wg, o, why),
        false => dot4_lanes(profile, kernel, q.k.min(tile as u64), o, why),
    };
    let rows_per_wg = dot4_rows_per_workgroup(wg, lanes, sg);
    let row_bytes = rows.row_bytes;
    let t = &profile.tuning;
    let mut capped = None;
    let mut columns_capped = false;
    let parts: Vec<RowPart> = rows
        .parts
        .iter()
        .map(|&(first, n)| {
            let batches = n.div_ceil(rows_per_wg);
            let mut groups = batches;
            // Staged once per workgroup: x in one tile, or staged columns' tiles.
            if q.k <= tile as u64 || columns > 1 {
                groups = groups.min(t.persistent_workgroups);
                let staged_cap = (n * row_bytes / (t.dot4_weight_per_staged_x * 4 * q.k))
                    .max(t.dot4_min_workgroups);
                if staged_cap < groups {
                    groups = staged_cap;
                    capped.get_or_insert(groups);
                }
            }
            if columns > 1 && groups > t.staged_columns_workgroups {
                groups = t.staged_columns_workgroups;
                columns_capped = true;
            }
            part(profile, (first, n), (batches, groups), o)
        })
        .collect();
    if let (Some(workgroups), None) = (capped, o.max_workgroups) {
        why.push(Clause::StagingCapsWorkgroups {
            workgroups,
            weight_per_staged_x: t.dot4_weight_per_staged_x,
        });
    }
    if columns_capped && o.max_workgroups.is_none() {
        why.push(Clause::StagedColumnsWorkgroups {
            workgroups: t.staged_columns_workgroups,
        });
    }
    override_workgroups(o, why);
    let batches = if columns > 1 {
        staged_batches
    } else {
        dot4_batches(
            profile,
            kernel,
            q,
            tile,
            rows_per_wg * row_bytes,
            &parts,
            rows_per_wg,
            o,
            why,
        )
    };
    let config = Dot4Launch {
        wg,
        lanes,
        planes,
        x: Dot4X::Staged {
            tile,
            from,
            batches,
        },
        columns_at_once: columns,
    };
    (LaunchConfig::Dot4(config), parts)
}

/// Clause 7: the columns a staging dot4 workgroup stages at once, for a model whose
/// decode steps take up to `q.columns` rows (none is said for one): as many as fit its
/// workgroup memory up to the step's rows and [`MAX_COLUMNS_AT_ONCE`] (or the
/// override's `columns_at_once`), with a kernel that splits its slices. Each workgroup
/// then stages a run of columns once (per tile) and dots each loaded slice with
/// every one (`wgsl/matvec/dot4_prefetch.wgsl`, `staged_columns`), where one at a time
/// restages x per column and row batch and reloads the weights per column.
///
/// x is staged in the tile [`x_tile`] makes for one column, so where K's x for one
/// column fits but not for the step's rows (the 8B shape's K = 14,336 on 48 KiB: 2
/// columns), fewer columns at once, each run reading the weights again. Asked
/// (`staged_tiles`), in tiles small enough for all of them ([`x_tile`] of
/// [`staged_columns_wanted`]), staged tile by tile, each row's totals summed over the
/// tiles in y.
///
/// Its workgroups take their batches in a grid-stride loop, each lane loading its next
/// slice ahead where x is one tile (unless the override says no, `staged_prefetch`);
/// the batches are returned with the columns. On the H100 at 8 columns ahead took the
/// Q4_K down projection (2 at once) from 84.6 to 76.9 µs and the Q6_K head from 569.7
/// to 545.4, and 8 sequences from 696.2 to 722.8 tok/s; Q6_K gains too, unlike at one
/// column (`results/parallel/staged_prefetch`).
fn staged_columns(
    profile: &DeviceProfile,
    q: &MatvecQuery,
    kernel: &'static MatvecKernel,
    (tile, stage): (u32, XStage),
    o: &Overrides,
    why: &mut Vec<Clause>,
) -> (u32, Batches) {
    if q.columns < 2 || !kernel.splits_slices() {
        return (1, Batches::GridStride);
    }
    let storage = profile.workgroup_storage_bytes as u64;
    let bytes = |c: u32| stage.columns_tile_bytes(tile as u64, c as u64);
    let most = staged_columns_wanted(q, kernel, o) as u32;
    let off = most == 1;
    let columns = (2..=most).rev().find(|&c| bytes(c) <= storage).unwrap_or(1);
    let tiles = q.k.div_ceil(tile as u64);
    let prefetch = columns > 1 && tiles == 1 && o.staged_prefetch != Some(false);
    why.push(Clause::StagedColumns {
        columns,
        rows: q.columns,
        tiles,
        bytes: bytes(columns.max(2)),
        workgroup_kib: profile.workgroup_storage_bytes / 1024,
        off,
        prefetch,
    });
    let batches = if prefetch {
        Batches::Prefetch
    } else {
        Batches::GridStride
    };
    (columns, batches)
}

/// The columns a model whose decode steps take up to `q.columns` rows would stage at
/// once: the step's rows up to [`MAX_COLUMNS_AT_ONCE`] or the override's
/// `columns_at_once`, with a kernel that splits its slices; one where the run turns
/// staged columns off (`staged_columns` no, or one column at once).
fn staged_columns_wanted(q: &MatvecQuery, kernel: &MatvecKernel, o: &Overrides) -> u64 {
    if q.columns < 2 || !kernel.splits_slices() || o.staged_columns == Some(false) {
        return 1;
    }
    q.columns
        .min(MAX_COLUMNS_AT_ONCE as u64)
        .min(o.columns_at_once.unwrap_or(MAX_COLUMNS_AT_ONCE) as u64)
}

/// The columns a dot4 launch that reads x in place dots each loaded slice with: as many
/// as the override asks where the kernel splits its slices, else one; with the clause
/// that says which, where the override asked.
fn columns_at_once(kernel: &'static MatvecKernel, o: &Overrides, why: &mut Vec<Clause>) -> u32 {
    let Some(asked) = o.columns_at_once else {
        return 1;
    };
    let columns = if kernel.splits_slices() { asked } else { 1 };
    why.push(Clause::ColumnsAtOnce { columns, asked });
    columns
}

/// The int8 planes dot4 multiplies x on: one, as llama.cpp rounds activations, unless
/// the override asks for two (x's residual 256 times finer: logits within a few
/// hundredths of exact math where one plane's move by llama.cpp's amount, up to about
/// 1 on SmolLM2; on the H200 two cost 12 % of the 8B shape's decode and 9 % of
/// SmolLM2's, results/int8_tail).
fn x_planes(o: &Overrides, why: &mut Vec<Clause>) -> u32 {
    match o.x_planes {
        Some(planes) => {
            why.push(Clause::Override(Override::XPlanes(planes)));
            planes
        }
        None => 1,
    }
}

/// Clause 4: what dot4 stages x from, by what the op before hands it; None where x
/// arrives quantized and is read in place.
///
/// A norm writes its output quantized as well for matrices of at least
/// [`Tuning::norm_q8_min_bytes`]: the q8 norm costs about 1.5 µs more per dispatch on
/// the H200 than the f32 one (SmolLM2: 8 % slower decode with every norm writing q8);
/// copying instead of quantizing saved 0.5 µs per SmolLM2 matvec, 1-2 µs on 30-60 MB
/// FFN shapes, and 3-4 µs on 360-930 MB lm-heads. Rechecked once Q4_1 and Q8_0 read
/// such x in place, alternated on one H200: every norm writing q8 still cost a
/// SmolLM2-shape Q4_1 model 720 -> 680 tok/s and the Llama-3-8B shape 288 -> 285.
///
/// silu(gate) * up is computed and quantized once by its own dispatch for down
/// projections of at least [`Tuning::glu_q8_min_bytes`]: computing it while staging
/// costs each workgroup 8 bytes of reads and an exp per element of K, where the extra
/// dispatch costs the step a fixed launch. Measured on the H200 (`compare --synthetic P
/// --glu-q8 true|false`, Q4_K_M mixes, alternated, three runs each): SmolLM2-135M's
/// shape (down 0.5 MB) 768-771 tok/s while staging, 732-733 by its own dispatch;
/// Llama-3.2-1B's (9.4 and 13.8 MB) 877-880 -> 882-885; Llama-3-8B's (33 and 48 MB) 295
/// -> 305; a 2-layer muse-30b (67 and 98 MB) 1,470 -> 1,510.
fn dot4_x(
    profile: &DeviceProfile,
    q: &MatvecQuery,
    kernel: &'static MatvecKernel,
    row_bytes: u64,
    o: &Overrides,
    why: &mut Vec<Clause>,
) -> Option<StagedFrom> {
    let bytes = q.m * row_bytes;
    let t: &Tuning = &profile.tuning;
    let weight_mb = bytes as f64 / 1e6;
    // x is quantized once for weights of at least `min` bytes, or for steps of several
    // rows; the rows, where they alone decided it.
    let by_columns = q.columns >= t.q8_min_columns;
    let by_rule = |min: u64| bytes >= min || by_columns;
    let columns_decided = |min: u64| (bytes < min && by_columns).then_some(q.columns);
    match q.x {
        XInput::F32 => Some(StagedFrom::F32),
        XInput::Norm if o.x_q8.unwrap_or(by_rule(t.norm_q8_min_bytes)) => {
            why.push(Clause::NormWritesQ8 {
                weight_mb,
                min_mb: t.norm_q8_min_bytes / 1_000_000,
                columns: columns_decided(t.norm_q8_min_bytes),
                forced: o.x_q8.is_some(),
            });
            x_from_q8(kernel, o, why)
        }
        XInput::Norm => Some(StagedFrom::F32),
        XInput::Glu { .. } if o.glu_q8.unwrap_or(by_rule(t.glu_q8_min_bytes)) => {
            why.push(Clause::GluQuantizedOnce {
                weight_mb,
                min_mb: t.glu_q8_min_bytes / 1_000_000,
                columns: columns_decided(t.glu_q8_min_bytes),
                forced: o.glu_q8.is_some(),
            });
            x_from_q8(kernel, o, why)
        }
        XInput::Glu { up } => {
            why.push(Clause::GluWhileStaging);
            Some(StagedFrom::Glu { up })
        }
    }
}

/// x that arrives quantized is read in place where a lane's slice is a whole 32-weight
/// block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): the lanes of a row read consecutive x groups,
/// 48 bytes apart, which stay in the compute unit's cache for every row. A K-quant
/// lane's slice meets two groups (four for Q6_K), and its loads of them, at twice that
/// stride or more, lost in place, so staging copies x for the K-quants.
///
/// Measured on the H200 (% of the probe, staged copy -> in place, alternated on one
/// machine): the 128,256 x 4,096 heads Q8_0 92.6 -> 96.2, Q4_1 79.6 -> 90.4, Q4_0 73.8
/// -> 83.3, Q5_1 81.3 -> 90.7; Q8_0 14,336 x 4,096 60.4 -> 62.8 and 4,096 x 14,336
/// 58.4 -> 60.8, Q4_1 50 -> 54 and 46 -> 50. In place the K-quants lost: the Q4_K head
/// 78 -> 75.6 and Q6_K 79.5 -> 60.7, FFN shapes Q4_K -3 / 0, Q6_K -10 / -8.
fn x_from_q8(
    kernel: &'static MatvecKernel,
    o: &Overrides,
    why: &mut Vec<Clause>,
) -> Option<StagedFrom> {
    let whole_blocks = kernel.slices_per_block() == 1 && kernel.ty.block_size() == 32;
    if o.x_in_place.unwrap_or(whole_blocks) {
        None
    } else {
        why.push(Clause::StagingCopiesQ8);
        Some(StagedFrom::Q8)
    }
}

/// Fraction of lane rounds idle when `lanes` lanes share `slices` slices of a row.
fn idle_fraction(slices: u64, lanes: u64) -> f64 {
    let rounds = slices.div_ceil(lanes);
    (rounds * lanes - slices) as f64 / (rounds * lanes) as f64
}

/// Clause 5: dot4 lanes per row of `k` weights (the part of a row one x tile covers): a
/// whole subgroup, which keeps the row uniform across it, unless a row spans two rounds
/// of it or more, its lanes would idle in the last round, and a narrower team (half or
/// a quarter of the smallest subgroup, at least 4 lanes) leaves fewer idle. On the H200
/// the 202,048 x 6,656 Q5_K head (104 slices a row) went from 66 % to 80 % of the probe
/// with 8 lanes; where 32 lanes divide a row evenly, teams of 8 or 16 mostly lost
/// (2-19 %; the Q6_K head gained 2 %).
fn dot4_lanes(
    profile: &DeviceProfile,
    kernel: &MatvecKernel,
    k: u64,
    o: &Overrides,
    why: &mut Vec<Clause>,
) -> u32 {
    if let Some(lanes) = o.lanes {
        why.push(Clause::Override(Override::Lanes(lanes)));
        return lanes;
    }
    let slices = k / kernel.ty.block_size() as u64 * kernel.slices_per_block();
    let subgroup = profile.subgroup_max.max(1) as u64;
    let whole = idle_fraction(slices, subgroup);
    // Rows of less than two rounds are launch-bound shapes (SmolLM2's K = 576 and
    // 1,536): there teams cost the H200 1.6 % per decoded token.
    if whole == 0.0 || slices < 2 * subgroup {
        return 0;
    }
    let narrowest = profile.subgroup_min.min(32);
    let best = [narrowest, narrowest / 2, narrowest / 4]
        .into_iter()
        .filter(|&l| l >= 4)
        .map(|l| (l, idle_fraction(slices, l as u64)))
        // On a tie the first, wider team.
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match best {
        Some((lanes, idle)) if idle < whole => {
            why.push(Clause::TeamLanes {
                lanes,
                slices,
                whole_idle_pct: 100.0 * whole,
                team_idle_pct: 100.0 * idle,
            });
            lanes
        }
        _ => 0,
    }
}

/// Clause 5 for staged columns: the narrowest team of lanes per row (a quarter or half
/// of the smallest subgroup, at least 4 lanes) whose row batches in the largest part
/// are at least [`Tuning::staged_team_min_batches`], else [`dot4_lanes`]'s. Each of a
/// row's columns ends in a subgroup sum, which a whole subgroup spends on one row and
/// teams of 8 on four; and a lane takes 4 times the slices a row between them. A
/// narrower team never idles more lanes in a row's last round (it divides the wider).
fn staged_team_lanes(
    profile: &DeviceProfile,
    kernel: &MatvecKernel,
    k: u64,
    rows: &Rows,
    wg: u32,
    o: &Overrides,
    why: &mut Vec<Clause>,
) -> u32 {
    if o.lanes.is_some() {
        return dot4_lanes(profile, kernel, k, o, why);
    }
    let sg = profile.subgroup_max;
    let largest = rows.parts.iter().map(|&(_, n)| n).max().unwrap_or(0);
    let min_batches = profile.tuning.staged_team_min_batches;
    let narrowest = profile.subgroup_min.min(32);
    let team = [narrowest / 4, narrowest / 2]
        .into_iter()
        .filter(|&l| l >= 4)
        .map(|l| (l, largest.div_ceil(dot4_rows_per_workgroup(wg, l, sg))))
        .find(|&(_, batches)| batches >= min_batches);
    match team {
        Some((lanes, batches)) => {
            why.push(Clause::StagedColumnsTeam {
                lanes,
                rows_per_sum: (profile.subgroup_min / lanes, sg / lanes),
                batches,
                min_batches,
            });
            lanes
        }
        None => dot4_lanes(profile, kernel, k, o, why),
    }
}

/// Clause 6: how staging dot4 workgroups take row batches.
///
/// From a queue where each workgroup has at least [`Tuning::queue_min_batches`] of at
/// least [`Tuning::queue_min_batch_bytes`]: with a fixed share of few batches, the
/// workgroups with one more than the rest decide when the matvec ends, but each queued
/// batch costs an atomic and a barrier. On the H200 (% of the probe, alternated): the
/// 202,048 x 6,656 Q5_K head (6.17 batches of 146 KB per workgroup) on quantized x
/// 88.0-88.5 -> 89.3-89.7, the Q8_0 128,256 x 4,096 head (15.7 of 35 KB) 86.5-86.7 ->
/// 90.0-90.3; with the queue for every route, the Q6_K, Q5_K and Q4_K heads (batches of
/// 27, 22, 18 KB) lost 0.5, 1.4 and 2.5, and the FFN shapes (2-3.5 per workgroup) 0.5-2.
///
/// Else, for kernels that split slices (Q4_K, Q5_K) with x in one tile and at least
/// [`Tuning::prefetch_min_batches`] per workgroup, each lane loads its next slice ahead,
/// across the end of a row too, so a workgroup never waits at a row's end with nothing
/// in flight. On the H200 (x quantized, as heads take it): the 128,256 x 4,096 heads
/// Q4_K 78.3-78.8 -> 81.4-81.9, Q5_K 72.6-75.9 -> 78.7-82.5. Q6_K split the same way
/// gained nothing, so it does not split; on f32 x the Q5_K head lost 2-5; the Llama-3-8B
/// FFN shapes (2-3.6 batches per workgroup) went both ways, -7 to +3.
#[allow(clippy::too_many_arguments)]
fn dot4_batches(
    profile: &DeviceProfile,
    kernel: &MatvecKernel,
    q: &MatvecQuery,
    tile: u32,
    batch_bytes: u64,
    parts: &[RowPart],
    rows_per_wg: u64,
    o: &Overrides,
    why: &mut Vec<Clause>,
) -> Batches {
    if let Some(b) = o.batches {
        why.push(Clause::Override(Override::Batches(b)));
        return b;
    }
    let t = &profile.tuning;
    // The first part is the largest.
    let per_workgroup = parts.first().map_or(0.0, |p| {
        p.rows.div_ceil(rows_per_wg) as f64 / p.workgroups[0] as f64
    });
    if batch_bytes >= t.queue_min_batch_bytes && per_workgroup >= t.queue_min_batches {
        why.push(Clause::BatchQueue {
            per_workgroup,
            batch_bytes,
        });
        return Batches::Queue;
    }
    if kernel.prefetch_pays() && q.k <= tile as u64 && per_workgroup >= t.prefetch_min_batches {
        why.push(Clause::Prefetch { per_workgroup });
        return Batches::Prefetch;
    }
    Batches::GridStride
}
