//! The router: a pure function from (device profile, weight type, M, K) to a route.
//!
//! Every predicate reads the profile, never a model catalog: there is no shape cap
//! anywhere. What does not fit on chip is tiled (K) or split across bindings (rows).
//! Each route carries the clauses that decided it, in the order they were applied.

mod plan;

pub use plan::{plan_gguf, write_route_table, Plan, PlanEntry, RouteRow};

use serde::Serialize;

use crate::device::DeviceProfile;
use crate::kernels::matvec::{self, CoopConfig, Family, MatvecKernel, RowPart};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// A per-run override for A/B comparisons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Force {
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

#[derive(Clone, Debug, Serialize)]
pub struct Route {
    pub kernel: &'static str,
    pub family: Family,
    pub ty: GgmlType,
    pub m: u64,
    pub k: u64,
    pub row_bytes: u64,
    /// Present for the coop family.
    pub coop: Option<CoopConfig>,
    /// One entry per weight binding (more than one when the tensor exceeds the device's
    /// binding limit).
    pub parts: Vec<RowPart>,
    /// Why, clause by clause.
    pub clauses: Vec<String>,
}

impl Route {
    pub fn matvec_kernel(&self) -> &'static MatvecKernel {
        matvec::find_by_name(self.kernel).expect("routes name existing kernels")
    }

    pub fn pipeline_key(&self) -> String {
        self.matvec_kernel().pipeline_key(self.coop)
    }

    pub fn reason(&self) -> String {
        self.clauses.join("; ")
    }

    /// Whether x arrives already quantized (a dot4 route fed by a q8 norm).
    pub fn x_q8(&self) -> bool {
        self.coop.is_some_and(|c| c.x_q8)
    }

    /// Bytes of the x binding for K values: f32, or quantized
    /// ([`matvec::quantize_x_q8`]). A `glu` route's binding holds two such inputs.
    pub fn x_bytes(&self) -> u64 {
        if self.x_q8() {
            self.k.div_ceil(32) * matvec::Q8_GROUP_BYTES
        } else {
            self.k * 4
        }
    }
}

/// Invocations per coop workgroup: enough subgroups to share each staged x tile.
const COOP_WG: u32 = 256;
/// Workgroups a single-tile coop matvec is spread over (each loops over row batches):
/// a few per compute unit on the largest GPUs brass targets (an H200 has 132 SMs and
/// holds 8 such workgroups each). Launch geometry only: every shape still runs.
const COOP_PERSISTENT_WORKGROUPS: u64 = 1024;
/// A dot4 workgroup reads and quantizes all of x (4 bytes a value) before its rows, so
/// dot4 spreads a matvec over no more workgroups than keep what they stage to a quarter
/// of the weights they read, and no fewer than DOT4_MIN_WORKGROUPS (about two per SM of
/// an H200). Measured on the H200 (Q4_K, % of the probe): 4,096 x 14,336 30 -> 37 % (256
/// workgroups instead of 512), 14,336 x 4,096 36 -> 41 % (512 instead of 1,024);
/// 4,096 x 4,096 loses 20 -> 18 % (256 instead of 512). A route whose x arrives
/// quantized (`CoopConfig::x_q8`, set by the model after routing) stages 1.5 bytes a
/// value by copying, yet keeps this count: 1,024 workgroups instead measured mostly 1-2
/// points lower on the FFN shapes and about 2 higher on 4,096 x 4,096.
const DOT4_WEIGHT_PER_STAGED_X: u64 = 4;
const DOT4_MIN_WORKGROUPS: u64 = 256;
/// dot4 takes row batches from a queue (`CoopConfig::queue`) when a workgroup has at
/// least DOT4_QUEUE_MIN_BATCHES of them, each of at least DOT4_QUEUE_MIN_BATCH_BYTES of
/// weights. With a fixed share of few batches, the workgroups with one more than the
/// rest decide when the matvec ends; but each queued batch costs an atomic on one
/// counter and a workgroup barrier. Measured on the H200 (% of the probe, builds
/// alternated on one machine): with the queue, the 202,048 x 6,656 Q5_K head (6.17
/// batches of 146 KB per workgroup) on pre-quantized x 88.0-88.5 -> 89.3-89.7, the Q8_0
/// 128,256 x 4,096 head (15.7 batches of 35 KB) 86.5-86.7 -> 90.0-90.3; with the queue
/// for every route, the Q6_K, Q5_K and Q4_K heads (batches of 27, 22, 18 KB) lost 0.5,
/// 1.4 and 2.5, and the FFN shapes (2-3.5 batches per workgroup) 0.5-2.
const DOT4_QUEUE_MIN_BATCHES: f64 = 4.0;
const DOT4_QUEUE_MIN_BATCH_BYTES: u64 = 32 * 1024;
/// A dot4 route whose kernel can (`matvec::dot4_splits_slices`: Q4_K, Q5_K), with x in
/// one tile and no queue, loads each lane's next slice before it computes the one it
/// holds, across the end of a row too (`CoopConfig::prefetch`), where a workgroup has at
/// least DOT4_PREFETCH_MIN_BATCHES row batches: a workgroup that runs through many rows
/// then never waits at a row's end with nothing in flight. Measured on the H200 (% of
/// the probe, builds alternated on one machine, two device calls, x pre-quantized as the
/// model hands it to heads): the 128,256 x 4,096 heads (15.7 batches per workgroup) Q4_K
/// 78.3-78.8 -> 81.4-81.9, Q5_K 72.6-75.9 -> 78.7-82.5. Q6_K split the same way gained
/// nothing (79.8-82.9 -> 79.8-82.4), so it does not split. On f32 x the Q5_K head lost
/// 2-5 (the model gives heads pre-quantized x). The Llama-3-8B FFN shapes (2-3.6 batches
/// per workgroup) went both ways, -7 to +3 (Q5_K 14,336 x 4,096 on f32 x 47 -> 39), so
/// they do not.
const DOT4_PREFETCH_MIN_BATCHES: f64 = 8.0;
/// Rows per scalar workgroup, fixed by `wgsl/matvec/scalar.wgsl`.
const SCALAR_ROWS_PER_WG: u64 = 64;
/// The coop tile is a multiple of this, so of every block size (32 and 256).
const TILE_QUANTUM: u64 = 256;

/// Fraction of lane rounds idle when `lanes` lanes share `slices` slices of a row.
fn idle_fraction(slices: u64, lanes: u64) -> f64 {
    let rounds = slices.div_ceil(lanes);
    (rounds * lanes - slices) as f64 / (rounds * lanes) as f64
}

/// dot4 lanes per row of `k` weights of type `ty` (the part of a row one x tile
/// covers): a whole subgroup, which keeps the row uniform across it, unless
/// a row spans two rounds of it or more, its lanes would idle in the last round, and a
/// narrower team (half or a quarter of the smallest subgroup, at least 4 lanes) leaves
/// fewer idle. On the H200 the 202,048 x 6,656 Q5_K head (104 slices a row) went from
/// 66 % to 80 % of the probe with 8 lanes; where 32 lanes divide a row evenly, teams of
/// 8 or 16 mostly lost (2-19 %; the Q6_K head gained 2 %).
fn dot4_lanes(profile: &DeviceProfile, ty: GgmlType, k: u64) -> (u32, Option<String>) {
    let slices = k / ty.block_size() as u64 * matvec::dot4_slices_per_block(ty);
    let subgroup = profile.subgroup_max.max(1) as u64;
    let whole = idle_fraction(slices, subgroup);
    // Rows of less than two rounds are launch-bound shapes (SmolLM2's K = 576 and
    // 1,536): there teams cost the H200 1.6 % per decoded token.
    if whole == 0.0 || slices < 2 * subgroup {
        return (0, None);
    }
    let narrowest = profile.subgroup_min.min(32);
    let best = [narrowest, narrowest / 2, narrowest / 4]
        .into_iter()
        .filter(|&l| l >= 4)
        .map(|l| (l, idle_fraction(slices, l as u64)))
        // On a tie the first, wider team.
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match best {
        Some((lanes, idle)) if idle < whole => (
            lanes,
            Some(format!(
                "{lanes} lanes per row: {slices} slices a row leave {:.0} % of a whole \
                 subgroup's lanes idle, {:.0} % of {lanes}",
                100.0 * whole,
                100.0 * idle
            )),
        ),
        _ => (0, None),
    }
}

/// Routes a matvec `y[M] = W[M, K] · x[K]` with weights of type `ty`.
pub fn route_matvec(
    profile: &DeviceProfile,
    ty: GgmlType,
    m: u64,
    k: u64,
    force: Option<&Force>,
) -> Result<Route> {
    let mut clauses = Vec::new();
    if m == 0 || k == 0 {
        return Err(Error::Invalid(format!("matvec of shape {m} x {k}")));
    }
    let row_bytes = ty.bytes_for(k).ok_or_else(|| {
        Error::UnsupportedType(format!(
            "{ty} needs K to be a multiple of {} (K = {k})",
            ty.block_size()
        ))
    })?;
    if matvec::find(ty, Family::Scalar).is_none() && matvec::find(ty, Family::Coop).is_none() {
        return Err(Error::UnsupportedType(format!(
            "no matvec kernel for {ty} weights"
        )));
    }

    // Clause 1: the family.
    let cooperative_fits = profile.subgroups
        && profile.subgroup_min >= 4
        && profile.workgroup_storage_bytes as u64 >= TILE_QUANTUM * 2
        && profile.max_invocations_per_workgroup >= 64;
    let has = |f: Family| matvec::find(ty, f).is_some();
    let mut forced_kernel = None;
    let family = match force {
        Some(Force::Family(Family::Dot4)) if !has(Family::Dot4) => {
            clauses.push(format!(
                "forced family dot4 has no {ty} kernel (x stays float for float weights): coop"
            ));
            Family::Coop
        }
        Some(Force::Family(f)) => {
            clauses.push(format!("forced family {}", f.name()));
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
            clauses.push(format!("forced kernel {name}"));
            forced_kernel = Some(kernel);
            kernel.family
        }
        None if cooperative_fits && has(Family::Dot4) => {
            clauses.push(format!(
                "subgroups {}..{} and {} KiB workgroup memory: dot4 (x rounded to int8 \
                 groups, as llama.cpp's Q8_1; force coop for exact activations)",
                profile.subgroup_min,
                profile.subgroup_max,
                profile.workgroup_storage_bytes / 1024
            ));
            Family::Dot4
        }
        None if cooperative_fits && has(Family::Coop) => {
            clauses.push(format!(
                "subgroups {}..{} and {} KiB workgroup memory: coop",
                profile.subgroup_min,
                profile.subgroup_max,
                profile.workgroup_storage_bytes / 1024
            ));
            Family::Coop
        }
        None => {
            clauses.push(if !profile.subgroups {
                "no subgroups: scalar".to_string()
            } else if !has(Family::Coop) {
                format!("no coop kernel for {ty}: scalar")
            } else {
                "subgroups too small or too little workgroup memory: scalar".to_string()
            });
            Family::Scalar
        }
    };
    if family.cooperative() && !cooperative_fits {
        return Err(Error::Invalid(format!(
            "the {} family cannot run {ty} on {} (subgroups: {}, {} B workgroup memory)",
            family.name(),
            profile.name,
            profile.subgroups,
            profile.workgroup_storage_bytes
        )));
    }
    let kernel = match forced_kernel {
        Some(k) => k,
        None => matvec::find(ty, family).ok_or_else(|| {
            Error::UnsupportedType(format!("no {} matvec kernel for {ty}", family.name()))
        })?,
    };

    // Clause 2: coop geometry, from the device's limits.
    let mut coop = family.cooperative().then(|| {
        let x = kernel.x_stage(profile.f16);
        let wg = COOP_WG
            .min(profile.max_invocations_per_workgroup)
            .min(profile.max_workgroup_size_x);
        // The largest multiple of the quantum, up to K, whose staging fits.
        let storage = profile.workgroup_storage_bytes as u64;
        let tile = (1..)
            .map(|n| n * TILE_QUANTUM)
            .take_while(|&t| t <= k.next_multiple_of(TILE_QUANTUM) && x.tile_bytes(t) <= storage)
            .last()
            .unwrap_or(TILE_QUANTUM);
        let tiles = k.div_ceil(tile);
        clauses.push(if tiles == 1 {
            format!(
                "x staged once per workgroup as {} ({} of {} KiB workgroup memory)",
                x.name(),
                x.tile_bytes(tile),
                profile.workgroup_storage_bytes / 1024
            )
        } else {
            format!(
                "x staged as {} in {tiles} tiles of {tile} (workgroup memory {} KiB)",
                x.name(),
                profile.workgroup_storage_bytes / 1024
            )
        });
        // One row per subgroup. The coop driver can pair rows (`rows: 2`: shared x reads,
        // overlapped weight loads), but on the H200 that won for Q4_1 and Q4_K heads
        // (-13%, -14%) and lost for Q8_0 (3x slower) and Q6_K (+24%): it stays an A/B
        // option of benches/matvec.rs (--coop-rows) until a rule explains both.
        let rows = 1;
        let lanes = if family == Family::Dot4 {
            let (lanes, clause) = dot4_lanes(profile, ty, k.min(tile));
            clauses.extend(clause);
            lanes
        } else {
            0
        };
        // The options the clauses below and the model may turn on, off.
        CoopConfig {
            wg,
            tile: tile as u32,
            x,
            rows,
            lanes,
            ..CoopConfig::canonical(x)
        }
    });

    // Clause 3: split rows across bindings when the tensor exceeds the binding limit.
    let limit = profile.usable_binding_bytes();
    if row_bytes > limit {
        return Err(Error::Invalid(format!(
            "one {ty} row of {k} values ({row_bytes} bytes) exceeds {}'s {limit}-byte binding",
            profile.name
        )));
    }
    let rows_per_part = (limit / row_bytes).min(m);
    let n_parts = m.div_ceil(rows_per_part);
    if n_parts > 1 {
        clauses.push(format!(
            "{} bytes exceed the {limit}-byte binding: {n_parts} parts of up to {rows_per_part} rows",
            m * row_bytes
        ));
    }
    let max_groups = profile.max_workgroups_per_dim.max(1) as u64;
    let mut staged_clause = None;
    let parts: Vec<RowPart> = (0..n_parts)
        .map(|i| {
            let first_row = i * rows_per_part;
            let rows = rows_per_part.min(m - first_row);
            let workgroups = match coop {
                // Plan for the largest subgroup the device may run: each subgroup takes a
                // row, and the kernel's grid-stride loop covers any shortfall.
                Some(c) => {
                    let rows_per_wg = c.rows_per_workgroup(profile.subgroup_max);
                    let mut groups = rows.div_ceil(rows_per_wg).min(max_groups);
                    if k <= c.tile as u64 {
                        // x is staged once per workgroup: past enough workgroups to
                        // fill the GPU, more of them only re-stage x.
                        groups = groups.min(COOP_PERSISTENT_WORKGROUPS);
                        let staged_cap = (rows * row_bytes / (DOT4_WEIGHT_PER_STAGED_X * 4 * k))
                            .max(DOT4_MIN_WORKGROUPS);
                        if family == Family::Dot4 && staged_cap < groups {
                            groups = staged_cap;
                            staged_clause.get_or_insert_with(|| {
                                format!(
                                    "{groups} workgroups: more would stage more than \
                                     1/{DOT4_WEIGHT_PER_STAGED_X} of the weights' bytes in x \
                                     (each workgroup quantizes all of it)"
                                )
                            });
                        }
                    }
                    [groups as u32, 1, 1]
                }
                None => {
                    let groups = rows.div_ceil(SCALAR_ROWS_PER_WG);
                    let x = groups.min(max_groups);
                    [x as u32, groups.div_ceil(x) as u32, 1]
                }
            };
            RowPart {
                first_row,
                rows,
                workgroups,
            }
        })
        .collect();
    clauses.extend(staged_clause);

    // Clause 4: dot4 workgroups take their row batches from a queue where each has
    // several, and big enough that the queue's atomic is cheap beside one.
    if let (Family::Dot4, Some(c), Some(p)) = (family, coop.as_mut(), parts.first()) {
        let batch_bytes = c.rows_per_workgroup(profile.subgroup_max) * row_bytes;
        let per_wg = batches_per_workgroup(profile, c, p);
        if batch_bytes >= DOT4_QUEUE_MIN_BATCH_BYTES && per_wg >= DOT4_QUEUE_MIN_BATCHES {
            c.queue = true;
            clauses.push(format!(
                "row batches from a queue: {per_wg:.2} batches of {:.0} KB per workgroup",
                batch_bytes as f64 / 1e3
            ));
        }
    }

    // Clause 6: the K-quants load a slice ahead where workgroups run through many rows.
    if let (Family::Dot4, Some(c), Some(p)) = (family, coop.as_mut(), parts.first()) {
        let per_wg = batches_per_workgroup(profile, c, p);
        if matvec::dot4_splits_slices(ty)
            && !c.queue
            && k <= c.tile as u64
            && per_wg >= DOT4_PREFETCH_MIN_BATCHES
        {
            c.prefetch = true;
            clauses.push(format!(
                "each lane loads its next slice ahead, across rows: {per_wg:.1} row batches \
                 per workgroup"
            ));
        }
    }

    Ok(Route {
        kernel: kernel.name,
        family,
        ty,
        m,
        k,
        row_bytes,
        coop,
        parts,
        clauses,
    })
}

/// Row batches per workgroup of a coop route's row part (the first part is the largest).
fn batches_per_workgroup(profile: &DeviceProfile, c: &CoopConfig, part: &RowPart) -> f64 {
    part.rows
        .div_ceil(c.rows_per_workgroup(profile.subgroup_max)) as f64
        / part.workgroups[0] as f64
}

/// Clause 5: a dot4 route whose x arrives quantized, as the op that produced it wrote it
/// ([`matvec::quantize_x_q8`]'s layout, tails included). Its lanes read it in place where
/// a lane's slice is a whole 32-weight block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), so that
/// the lanes of a row read consecutive x groups, 48 bytes apart, which stay in the
/// compute unit's cache for every row. Nothing is staged, nobody waits at a barrier, and
/// a workgroup is one row batch. A K-quant lane's slice meets two groups (four for
/// Q6_K) and its loads of them, at twice that stride or more, lost in place, so staging
/// copies x for the K-quants. `direct` overrides the choice (A/B runs).
///
/// Measured on the H200 (% of the probe, staged copy -> in place, alternated on one
/// machine): the 128,256 x 4,096 heads Q8_0 92.6 -> 96.2, Q4_1 79.6 -> 90.4, Q4_0 73.8
/// -> 83.3, Q5_1 81.3 -> 90.7; Q8_0 14,336 x 4,096 60.4 -> 62.8 and 4,096 x 14,336
/// 58.4 -> 60.8, Q4_1 50 -> 54 and 46 -> 50. In place the K-quants lost: the Q4_K head
/// 78 -> 75.6 and Q6_K 79.5 -> 60.7 (63 and 51 on 1,024 persistent workgroups), FFN
/// shapes Q4_K -3 / 0, Q6_K -10 / -8.
pub fn take_x_q8(profile: &DeviceProfile, route: &mut Route, direct: Option<bool>) {
    let Some(c) = route.coop.as_mut().filter(|_| route.family == Family::Dot4) else {
        return;
    };
    c.x_q8 = true;
    let in_order = matvec::dot4_slices_per_block(route.ty) == 1 && route.ty.block_size() == 32;
    if !direct.unwrap_or(in_order) {
        route
            .clauses
            .push("x arrives quantized; staging copies it".to_string());
        return;
    }
    c.x_direct = true;
    c.queue = false;
    // One batch per workgroup: no row to load ahead into.
    c.prefetch = false;
    // Nothing staged: the smallest tile keeps the unused workgroup arrays small.
    c.tile = TILE_QUANTUM as u32;
    let (lanes, lanes_clause) = dot4_lanes(profile, route.ty, route.k);
    c.lanes = lanes;
    let rows_per_wg = c.rows_per_workgroup(profile.subgroup_max);
    let max_groups = profile.max_workgroups_per_dim.max(1) as u64;
    for p in &mut route.parts {
        p.workgroups = [p.rows.div_ceil(rows_per_wg).min(max_groups) as u32, 1, 1];
    }
    route.clauses.push(format!(
        "x arrives quantized and {}its lanes read it in place (nothing staged; the tile, \
         lanes and workgroups above are replaced): one batch of {rows_per_wg} rows per workgroup{}",
        if direct.is_some() { "(forced) " } else { "" },
        lanes_clause.map(|l| format!(", {l}")).unwrap_or_default()
    ));
}
