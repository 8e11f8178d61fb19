//! A matvec launch: the kernel, the shape, its row parts and its family's launch
//! choices, as one typed value. The router makes it ([`crate::router::route_matvec`]);
//! nothing edits it after. Its methods upload weights for it, make its pipeline (keyed
//! by the same constants its WGSL is given) and record its dispatches.

use serde::Serialize;

use super::{Family, Layout, MatvecKernel, XStage, Q8_GROUP_BYTES};
use crate::device::{
    Access, BufferUse, Device, DeviceProfile, Dispatch, IndexChecks, OwnedBuffers, PipelineId,
    Slice,
};
use crate::kernels::wgsl::{WgslConst, WgslValue};
use crate::kernels::{PipelineCache, PipelineTemplate};
use crate::{Error, Result};

/// One dispatch's worth of rows: a weight part lives in its own binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RowPart {
    /// The part's first row of the matrix.
    pub first_row: u64,
    /// Rows in the part.
    pub rows: u64,
    /// The part's dispatch grid.
    pub workgroups: [u32; 3],
}

/// The launch choices of each kernel family: a combination the kernels cannot run
/// cannot be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LaunchConfig {
    /// One invocation per row; nothing to choose.
    Scalar,
    /// A subgroup per row, x staged as floats.
    Coop(CoopLaunch),
    /// A subgroup (or a team of lanes) per row, x as int8.
    Dot4(Dot4Launch),
}

/// `wgsl/matvec/coop.wgsl`: a subgroup per row, x staged as floats in K-tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CoopLaunch {
    /// Invocations per workgroup.
    pub wg: u32,
    /// Elements of x staged per tile; a multiple of 256, so of every block size.
    pub tile: u32,
    /// The float type x is staged as.
    pub x: FloatX,
}

/// How the coop driver stages x.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FloatX {
    /// f32: exact.
    F32,
    /// Needs SHADER_F16.
    F16,
}

impl FloatX {
    /// The same choice as an [`XStage`].
    pub fn stage(self) -> XStage {
        match self {
            FloatX::F32 => XStage::F32,
            FloatX::F16 => XStage::F16,
        }
    }
}

/// `wgsl/matvec/dot4.wgsl`: a subgroup (or a team of `lanes` of its lanes) per row, x
/// as int8 groups, the dot on packed integer dot products.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Dot4Launch {
    /// Invocations per workgroup.
    pub wg: u32,
    /// Lanes per row: 0 for a whole subgroup, or a power of two no wider than the
    /// device's smallest subgroup (a subgroup then takes several rows at once).
    pub lanes: u32,
    /// The int8 planes x is multiplied on (`wgsl/matvec/q8_x.wgsl`): 1 rounds it as
    /// llama.cpp does; 2 adds the residual 256 times finer, within a few hundredths of
    /// exact math in logits (issue 22) at a cost (H200: 12 % of the 8B shape's decode).
    pub planes: u32,
    /// Where its int8 x comes from.
    pub x: Dot4X,
    /// Columns each loaded weight slice is dotted with (`wgsl/matvec/dot4_prefetch.wgsl`,
    /// `columns_at_once`): 1, or with a kernel that splits its slices up to
    /// [`MAX_COLUMNS_AT_ONCE`], x in place or staged (then that many columns' tiles are
    /// staged at once, `staged_columns`, tile by tile where K takes several, and the
    /// workgroups take their batches in a grid-stride loop, loading slices ahead or not,
    /// never from the queue). A column is bit for bit this launch's one-column dispatch
    /// either way, but not the other setting's.
    pub columns_at_once: u32,
}

impl Dot4Launch {
    /// The columns of x a workgroup stages at once: [`Dot4Launch::columns_at_once`]
    /// where x is staged, else one.
    pub fn staged_columns(&self) -> u32 {
        match self.x {
            Dot4X::Staged { .. } => self.columns_at_once,
            Dot4X::InPlace => 1,
        }
    }
}

/// The most columns a dot4 launch dots each loaded slice with ([`Dot4Launch`]): one
/// accumulator each, in registers.
pub const MAX_COLUMNS_AT_ONCE: u32 = 8;

/// Where a dot4 launch's int8 x comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Dot4X {
    /// Staged per workgroup in tiles of `tile` elements (a multiple of 256), made from
    /// `from`; workgroups take row batches as `batches` says.
    Staged {
        /// Elements of x per tile.
        tile: u32,
        /// What is quantized (or copied) into the tile.
        from: StagedFrom,
        /// How workgroups take row batches.
        batches: Batches,
    },
    /// x arrives quantized ([`super::quantize_x_q8`]'s layout) and the lanes read it in
    /// place: nothing staged, and each workgroup is one row batch.
    InPlace,
}

/// What a staging dot4 workgroup quantizes (or copies) into its tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum StagedFrom {
    /// f32 x, quantized while staging.
    F32,
    /// silu(gate) * up of an f32 binding holding gate, and up from element `up` (a
    /// multiple of 4): the FFN's down projection, computed while staging.
    Glu {
        /// The element of the binding where up starts.
        up: u64,
    },
    /// x already quantized: staging copies it.
    Q8,
}

/// How staging dot4 workgroups take their row batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Batches {
    /// A grid-stride loop.
    GridStride,
    /// The first by workgroup index, the rest from a queue (the fourth binding).
    Queue,
    /// A grid-stride loop in which each lane loads its next slice, in this row or the
    /// next, before it computes the one it holds: kernels that split a slice into its
    /// loads and its arithmetic ([`MatvecKernel::splits_slices`]), x in one tile.
    Prefetch,
}

/// The form a launch takes its x binding in, which the op before it must write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum XForm {
    /// f32 values.
    F32,
    /// [`super::quantize_x_q8`]'s layout.
    Q8,
    /// gate, and up from element `up`, both f32.
    Glu {
        /// The element of the binding where up starts.
        up: u64,
    },
}

/// Bytes of the uniform block the drivers declare: m, k, row_bytes, y_offset, then for
/// `dot4` x_up, and for all cols, x_stride, y_stride (and padding).
const PARAMS_BYTES: u32 = 32;
const DOT4_PARAMS_BYTES: u32 = 32;

/// The most columns one matvec dispatch takes ([`MatvecLaunch::max_columns`]). No
/// kernel state grows with the columns: each family runs them one after another over
/// the same rows (one column's accumulators and staged x at a time), so workgroup
/// memory and registers set no bound. This one keeps a dispatch's run time within
/// cols times a one-column dispatch's that the tests can check at the bound (lavapipe),
/// and beyond it a step's tokens are a prompt batch's work for the matmuls. (Columns
/// loop around each row batch: weights come from cache after the first column, but on
/// the H200 a column still costs 0.4 to 1.0 of a one-column dispatch; see
/// `wgsl/matvec/dot4.wgsl`, `batch_rows`.)
pub const MAX_COLUMNS: u64 = 64;
const STORAGE: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite];
/// dot4 adds its batch queue (`wgsl/matvec/dot4.wgsl`, `take_batch`), bound whether or
/// not the launch takes batches from it.
const DOT4_STORAGE: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
];

/// Bytes of a dot4 batch queue: one counter, zero between dispatches (a fresh buffer is
/// zeroed, and every dispatch leaves it so). Dispatches that share one run one after
/// the other, as a read-write binding makes them.
pub const QUEUE_BYTES: u64 = 4;

/// A dot4 in-place launch stages nothing: the smallest tile keeps the driver's unused
/// workgroup arrays small.
const IN_PLACE_TILE: u32 = 256;

/// One matvec `y[M] = W[M, K] · x[K]` as it is launched.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MatvecLaunch {
    #[serde(serialize_with = "kernel_name")]
    kernel: &'static MatvecKernel,
    m: u64,
    k: u64,
    row_bytes: u64,
    parts: Vec<RowPart>,
    config: LaunchConfig,
}

fn kernel_name<S: serde::Serializer>(
    kernel: &&'static MatvecKernel,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(kernel.name)
}

impl MatvecLaunch {
    /// A launch of `kernel` with `config`, its rows in `parts`. Checked against `profile`:
    /// a launch the device cannot run is an error here, not a wrong answer later.
    pub(crate) fn new(
        profile: &DeviceProfile,
        kernel: &'static MatvecKernel,
        (m, k): (u64, u64),
        parts: Vec<RowPart>,
        config: LaunchConfig,
    ) -> Result<Self> {
        let row_bytes = kernel.ty.bytes_for(k).ok_or_else(|| {
            Error::UnsupportedType(format!(
                "{} needs K to be a multiple of {} (K = {k})",
                kernel.ty,
                kernel.ty.block_size()
            ))
        })?;
        let launch = MatvecLaunch {
            kernel,
            m,
            k,
            row_bytes,
            parts,
            config,
        };
        launch.check(profile)?;
        Ok(launch)
    }

    /// `kernel` as `spirv/` holds it, and as the tests read its WGSL: 256 invocations,
    /// a 4,096-element tile of x from f32 (f16 for coop), a whole subgroup per row,
    /// batches in a grid-stride loop or (`prefetch`) loading a slice ahead.
    pub fn canonical(kernel: &'static MatvecKernel, prefetch: bool) -> MatvecLaunch {
        let (wg, tile) = (256, 4096);
        let config = match kernel.family {
            Family::Scalar => LaunchConfig::Scalar,
            Family::Coop => LaunchConfig::Coop(CoopLaunch {
                wg,
                tile,
                x: FloatX::F16,
            }),
            Family::Dot4 => LaunchConfig::Dot4(Dot4Launch {
                wg,
                lanes: 0,
                planes: 1,
                x: Dot4X::Staged {
                    tile,
                    from: StagedFrom::F32,
                    batches: if prefetch {
                        Batches::Prefetch
                    } else {
                        Batches::GridStride
                    },
                },
                columns_at_once: 1,
            }),
        };
        let k = tile as u64;
        MatvecLaunch {
            kernel,
            m: k,
            k,
            row_bytes: kernel
                .ty
                .bytes_for(k)
                .expect("4,096 is whole blocks of every type"),
            parts: vec![RowPart {
                first_row: 0,
                rows: k,
                workgroups: [256, 1, 1],
            }],
            config,
        }
    }

    /// [`Self::canonical`] for a dot4 kernel that splits its slices, x read in place
    /// and each loaded slice dotted with `columns` columns at once.
    pub fn canonical_columns_at_once(kernel: &'static MatvecKernel, columns: u32) -> MatvecLaunch {
        let mut launch = Self::canonical(kernel, false);
        if let LaunchConfig::Dot4(c) = &mut launch.config {
            c.x = Dot4X::InPlace;
            c.columns_at_once = columns;
        }
        launch
    }

    /// Whether a device of `profile` can run this launch: an error says what it lacks.
    pub fn check(&self, profile: &DeviceProfile) -> Result<()> {
        let bad = |what: String| {
            Err(Error::Invalid(format!(
                "{} on {} x {}: {what}",
                self.kernel.name, self.m, self.k
            )))
        };
        let family = match self.config {
            LaunchConfig::Scalar => Family::Scalar,
            LaunchConfig::Coop(_) => Family::Coop,
            LaunchConfig::Dot4(_) => Family::Dot4,
        };
        if family != self.kernel.family {
            return bad(format!(
                "a {} launch of a {} kernel",
                family.name(),
                self.kernel.family.name()
            ));
        }
        let mut next = 0;
        for p in &self.parts {
            if p.first_row != next || p.rows == 0 {
                return bad(format!("row parts {:?} do not tile the rows", self.parts));
            }
            if p.rows * self.row_bytes > profile.usable_binding_bytes() {
                return bad(format!(
                    "a part of {} rows exceeds the binding limit",
                    p.rows
                ));
            }
            if p.workgroups
                .iter()
                .any(|&g| g == 0 || g > profile.max_workgroups_per_dim)
            {
                return bad(format!("{:?} workgroups", p.workgroups));
            }
            next += p.rows;
        }
        if next != self.m {
            return bad(format!("row parts {:?} do not tile the rows", self.parts));
        }
        let (wg, stage) = match self.config {
            LaunchConfig::Scalar => return Ok(()),
            LaunchConfig::Coop(c) => (c.wg, Some((c.tile, self.x_stage(), 1))),
            LaunchConfig::Dot4(c) => {
                let lanes_ok =
                    c.lanes == 0 || (c.lanes.is_power_of_two() && c.lanes <= profile.subgroup_min);
                if !lanes_ok {
                    return bad(format!(
                        "{} lanes per row on subgroups of {}..{}",
                        c.lanes, profile.subgroup_min, profile.subgroup_max
                    ));
                }
                if !(1..=super::MAX_X_PLANES).contains(&c.planes) {
                    return bad(format!(
                        "x on {} int8 planes (1 to {})",
                        c.planes,
                        super::MAX_X_PLANES
                    ));
                }
                if !(1..=MAX_COLUMNS_AT_ONCE).contains(&c.columns_at_once) {
                    return bad(format!(
                        "{} columns at once (1 to {MAX_COLUMNS_AT_ONCE})",
                        c.columns_at_once
                    ));
                }
                if c.columns_at_once > 1 && !self.kernel.splits_slices() {
                    return bad(format!(
                        "{} columns at once need a kernel that splits slices",
                        c.columns_at_once
                    ));
                }
                match c.x {
                    Dot4X::Staged { tile, batches, .. } => {
                        if batches == Batches::Prefetch
                            && !(self.kernel.splits_slices() && self.k <= tile as u64)
                        {
                            return bad(
                                "prefetch needs a kernel that splits slices and x in one tile"
                                    .into(),
                            );
                        }
                        if c.columns_at_once > 1 && batches == Batches::Queue {
                            return bad(format!(
                                "{} staged columns at once take no queue",
                                c.columns_at_once
                            ));
                        }
                        (c.wg, Some((tile, self.x_stage(), c.staged_columns())))
                    }
                    Dot4X::InPlace => (c.wg, None),
                }
            }
        };
        if wg == 0
            || wg > profile.max_invocations_per_workgroup
            || wg > profile.max_workgroup_size_x
        {
            return bad(format!("{wg} invocations per workgroup"));
        }
        if let Some((tile, stage, columns)) = stage {
            if tile == 0 || tile % 256 != 0 {
                return bad(format!("a tile of {tile} elements"));
            }
            let bytes = stage.columns_tile_bytes(tile as u64, columns as u64);
            if bytes > profile.workgroup_storage_bytes as u64 {
                return bad(format!(
                    "{columns} {} tile(s) of {tile} need {bytes} bytes of workgroup memory, the device has {}",
                    stage.name(),
                    profile.workgroup_storage_bytes
                ));
            }
            if stage == XStage::F16 && !profile.f16 {
                return bad("x staged as f16 on a device without SHADER_F16".into());
            }
        }
        Ok(())
    }

    /// The kernel.
    pub fn kernel(&self) -> &'static MatvecKernel {
        self.kernel
    }

    /// The kernel's family.
    pub fn family(&self) -> Family {
        self.kernel.family
    }

    /// Rows of W: values of y.
    pub fn m(&self) -> u64 {
        self.m
    }

    /// Columns of W: values of x.
    pub fn k(&self) -> u64 {
        self.k
    }

    /// Bytes of one row of weights (whole blocks of the type).
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// The row parts, one binding and dispatch each.
    pub fn parts(&self) -> &[RowPart] {
        &self.parts
    }

    /// The family's launch choices.
    pub fn config(&self) -> LaunchConfig {
        self.config
    }

    /// Bytes of weights.
    pub fn weight_bytes(&self) -> u64 {
        self.m * self.row_bytes
    }

    /// How x is staged in workgroup memory, if it is.
    pub fn x_stage(&self) -> XStage {
        match self.config {
            LaunchConfig::Coop(c) => c.x.stage(),
            LaunchConfig::Dot4(c) => XStage::int8(c.planes),
            LaunchConfig::Scalar => XStage::F32,
        }
    }

    /// The form x must arrive in.
    pub fn x_form(&self) -> XForm {
        let LaunchConfig::Dot4(c) = self.config else {
            return XForm::F32;
        };
        match c.x {
            Dot4X::InPlace => XForm::Q8,
            Dot4X::Staged { from, .. } => match from {
                StagedFrom::F32 => XForm::F32,
                StagedFrom::Q8 => XForm::Q8,
                StagedFrom::Glu { up } => XForm::Glu { up },
            },
        }
    }

    /// Bytes of the x binding: K floats, K values quantized, or gate and up.
    pub fn x_bytes(&self) -> u64 {
        match self.x_form() {
            XForm::F32 => self.k * 4,
            XForm::Q8 => self.k.div_ceil(32) * Q8_GROUP_BYTES,
            XForm::Glu { up } => (up + self.k) * 4,
        }
    }

    /// Bytes one matvec moves: the weights, x and y.
    pub fn bytes_moved(&self) -> u64 {
        self.weight_bytes() + self.x_bytes() + self.m * 4
    }

    /// Rows one workgroup takes per batch, planning for the largest subgroup the device
    /// may run (`subgroup_max`): one per subgroup, or per team of `lanes` (dot4).
    pub fn rows_per_workgroup(&self, subgroup_max: u32) -> u64 {
        let sg = subgroup_max.max(1);
        match self.config {
            LaunchConfig::Scalar => super::SCALAR_ROWS_PER_WG,
            LaunchConfig::Coop(c) => coop_rows_per_workgroup(c.wg, sg),
            LaunchConfig::Dot4(c) => dot4_rows_per_workgroup(c.wg, c.lanes, sg),
        }
    }

    /// Every constant the kernel's WGSL is composed with.
    pub fn constants(&self) -> Vec<WgslConst> {
        let (u32_, bool_) = (WgslConst::u32, WgslConst::bool);
        match self.config {
            LaunchConfig::Scalar => Vec::new(),
            LaunchConfig::Coop(c) => {
                let (xs, xs_bytes) = match c.x {
                    FloatX::F16 => ("f16", 2),
                    FloatX::F32 => ("f32", 4),
                };
                vec![
                    u32_("WG", c.wg),
                    u32_("TILE", c.tile),
                    u32_("XS_BYTES", xs_bytes),
                    WgslConst::alias("XS", xs),
                ]
            }
            LaunchConfig::Dot4(c) => {
                let (tile, from, batches, direct) = match c.x {
                    Dot4X::Staged {
                        tile,
                        from,
                        batches,
                    } => (tile, from, batches, false),
                    Dot4X::InPlace => (IN_PLACE_TILE, StagedFrom::Q8, Batches::GridStride, true),
                };
                vec![
                    u32_("WG", c.wg),
                    u32_("TILE", tile),
                    u32_("LANES", c.lanes),
                    u32_("X_PLANES", c.planes),
                    bool_("X_GLU", matches!(from, StagedFrom::Glu { .. })),
                    bool_("X_Q8", from == StagedFrom::Q8),
                    bool_("X_DIRECT", direct),
                    bool_("QUEUE", batches == Batches::Queue),
                    bool_("PREFETCH", batches == Batches::Prefetch),
                    u32_("COLUMNS_AT_ONCE", c.columns_at_once),
                    u32_("X_COLS", c.staged_columns()),
                ]
            }
        }
    }

    /// `enable` directives the WGSL needs.
    pub fn enables(&self) -> &'static [&'static str] {
        match self.config {
            LaunchConfig::Coop(CoopLaunch { x: FloatX::F16, .. }) => &["f16"],
            _ => &[],
        }
    }

    /// The pipeline's ledger name: the kernel and every constant of its WGSL (booleans
    /// by name where true), so two launches share a pipeline exactly when their code is
    /// the same.
    pub fn pipeline_key(&self) -> String {
        let mut key = self.kernel.name.to_string();
        for c in self.constants() {
            let name = c.name.to_lowercase();
            // One column at a time is the plain kernel: named only where more.
            if matches!(c.name, "COLUMNS_AT_ONCE" | "X_COLS")
                && matches!(c.value, WgslValue::U32(1))
            {
                continue;
            }
            match c.value {
                WgslValue::U32(v) => key += &format!(" {name}{v}"),
                WgslValue::Bool(true) => key += &format!(" {name}"),
                WgslValue::Bool(false) => {}
                WgslValue::Alias(t) => key += &format!(" {name}={t}"),
                WgslValue::Include(path) => key += &format!(" {name}={path}"),
            }
        }
        key
    }

    /// The complete WGSL.
    pub fn source(&self) -> Result<String> {
        self.kernel.source(self.enables(), &self.constants())
    }

    /// Its pipeline's bindings and parameter block.
    pub fn template(&self) -> PipelineTemplate {
        let dot4 = self.kernel.family == Family::Dot4;
        PipelineTemplate {
            params_bytes: if dot4 {
                DOT4_PARAMS_BYTES
            } else {
                PARAMS_BYTES
            },
            storage: if dot4 { DOT4_STORAGE } else { STORAGE },
            fallback_reason: None,
            // dot4 (matvec/dot4.wgsl and its type files) indexes workgroup memory only
            // through `slot(g)` of x groups g < TILE / 32: a tile's blocks are at most
            // TILE / BLOCK (`batch_rows`), its whole K at most TILE where staged
            // (`rows_prefetched` needs one tile), and each type's groups within a block
            // are below BLOCK / 32. Its private arrays and vectors take constants or
            // indices masked below their length; its storage reads are bounded by the
            // backend (IndexChecks::Kernel). tests/matvec.rs runs every dot4 case both
            // ways, bit for bit.
            index_checks: if dot4 {
                IndexChecks::Kernel
            } else {
                IndexChecks::Wgpu
            },
        }
    }

    /// The pipeline, created on first use.
    pub fn pipeline(&self, device: &dyn Device, cache: &PipelineCache) -> Result<PipelineId> {
        cache.get_or_create(device, &self.pipeline_key(), || {
            Ok((self.source()?, self.template()))
        })
    }

    /// A batch queue for this launch's dispatches if its family takes one (dot4).
    pub fn new_queue(&self, device: &dyn Device) -> Result<Option<Slice>> {
        (self.kernel.family == Family::Dot4)
            .then(|| create_queue(device))
            .transpose()
    }

    /// Uploads the weights: one buffer per row part.
    pub fn upload_weights(
        &self,
        device: &dyn Device,
        label: &str,
        bytes: &[u8],
    ) -> Result<Vec<Slice>> {
        self.upload_stacked_weights(device, label, &[bytes])
    }

    /// [`upload_weights`](Self::upload_weights) for a matrix stored as several tensors
    /// one after another (q, k and v stacked into one matrix), read in place: no host
    /// copy of the whole.
    pub fn upload_stacked_weights(
        &self,
        device: &dyn Device,
        label: &str,
        tensors: &[&[u8]],
    ) -> Result<Vec<Slice>> {
        self.upload_weights_in_pieces(device, label, tensors, ARRANGE_PIECE_BYTES)
    }

    /// [`upload_stacked_weights`](Self::upload_stacked_weights), arranging block-local
    /// layouts in pieces of about `piece_bytes` (whole blocks, a multiple of 4 bytes):
    /// the tests make pieces small.
    pub fn upload_weights_in_pieces(
        &self,
        device: &dyn Device,
        label: &str,
        tensors: &[&[u8]],
        piece_bytes: usize,
    ) -> Result<Vec<Slice>> {
        let ty = self.kernel.ty;
        let expected = self.weight_bytes();
        let given: u64 = tensors.iter().map(|t| t.len() as u64).sum();
        if given != expected {
            return Err(Error::Invalid(format!(
                "`{label}`: {given} bytes for a {} x {} {ty} matrix of {expected} bytes",
                self.m, self.k
            )));
        }
        let block_bytes = ty.type_size();
        let layout = self.kernel.layout;
        // Whole blocks, a multiple of four of them so that every piece starts 4-byte
        // aligned.
        let piece = (piece_bytes / block_bytes).next_multiple_of(4).max(4) * block_bytes;
        let mut scratch = Vec::new();
        // On an error the parts made so far are freed: the caller gets all or nothing.
        let owned = OwnedBuffers::borrowing(device);
        let mut parts = Vec::with_capacity(self.parts.len());
        for (i, p) in self.parts.iter().enumerate() {
            let start = (p.first_row * self.row_bytes) as usize;
            let len = (p.rows * self.row_bytes) as usize;
            let name = if self.parts.len() == 1 {
                label.to_string()
            } else {
                format!("{label} part {i}")
            };
            // Whole 16-byte elements for the kernels that read vec4<u32>.
            let size = (len as u64).next_multiple_of(16);
            let buffer = owned.create(&name, size, BufferUse::Weights)?;
            if !layout.block_local() {
                let part = byte_range(tensors, start, len);
                device.upload(buffer, 0, &layout.arrange(&part, block_bytes))?;
            } else {
                for at in (0..len).step_by(piece) {
                    let blocks = byte_range(tensors, start + at, piece.min(len - at));
                    if layout == Layout::Gguf {
                        device.upload(buffer, at as u64, &blocks)?;
                    } else {
                        scratch.clear();
                        scratch.extend_from_slice(&blocks);
                        layout.arrange_blocks_in_place(&mut scratch, block_bytes);
                        device.upload(buffer, at as u64, &scratch)?;
                    }
                }
            }
            parts.push(Slice::new(buffer, 0, size));
        }
        owned.release();
        Ok(parts)
    }

    /// The most columns one dispatch of [`dispatches_columns`](Self::dispatches_columns)
    /// takes: [`MAX_COLUMNS`] for every family (see it for why).
    pub fn max_columns(&self) -> u64 {
        MAX_COLUMNS
    }

    /// The dispatches computing `y[y_first + i] = (W·x)[i]`, one per row part.
    ///
    /// `weights[i]` holds the rows of part i; `x` is the x binding
    /// ([`x_bytes`](Self::x_bytes)), `y` holds at least `y_first` + M floats.
    /// `y_first` lets matvecs that share an input write side by side into one buffer at
    /// any element offset (a binding offset would have to be aligned). `queue`: a dot4
    /// launch's batch queue ([`QUEUE_BYTES`]), None for the other families.
    ///
    /// [`dispatches_columns`](Self::dispatches_columns) with one column: the same
    /// pipeline and code, so a one-token decode's y is bit for bit that column's y in a
    /// many-column step.
    pub fn dispatches(
        &self,
        pipeline: PipelineId,
        weights: &[Slice],
        x: Slice,
        y: Slice,
        y_first: u64,
        queue: Option<Slice>,
    ) -> Result<Vec<Dispatch>> {
        let (x_stride, y_stride) = (self.x_bytes(), self.m * 4);
        self.dispatches_columns(
            pipeline, weights, x, x_stride, y, y_stride, y_first, 1, queue,
        )
    }

    /// The dispatches computing `cols` matvecs at once, `y_c = W·x_c` for `c < cols`,
    /// one per row part: each weight is read from memory once for all columns, and
    /// column c's y is bit for bit what a one-column dispatch of x_c gives, whatever
    /// `cols` is (it is a parameter of the one pipeline, not a constant of its code).
    ///
    /// Column c of x starts `c * x_stride` bytes into the `x` binding, which covers all
    /// columns; column c of y at element `y_first` of `y` plus `c * y_stride` bytes.
    /// The strides are parameters rather than binding offsets, so they need only be
    /// whole elements of the bindings: 16 bytes for dot4's x (its binding's vec4), 4 for
    /// the other families' x and for y. 1 to [`max_columns`](Self::max_columns) columns.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatches_columns(
        &self,
        pipeline: PipelineId,
        weights: &[Slice],
        x: Slice,
        x_stride: u64,
        y: Slice,
        y_stride: u64,
        y_first: u64,
        cols: u64,
        queue: Option<Slice>,
    ) -> Result<Vec<Dispatch>> {
        if self.parts.len() != weights.len() {
            return Err(Error::Invalid(format!(
                "{} weight bindings for {} row parts",
                weights.len(),
                self.parts.len()
            )));
        }
        if (self.kernel.family == Family::Dot4) != queue.is_some() {
            return Err(Error::Invalid(format!(
                "{}: a batch queue is bound exactly for dot4 launches",
                self.kernel.name
            )));
        }
        let x_align = if self.kernel.family == Family::Dot4 {
            16
        } else {
            4
        };
        let bad = |what: String| Err(Error::Invalid(format!("{}: {what}", self.kernel.name)));
        if !(1..=self.max_columns()).contains(&cols) {
            return bad(format!("{cols} columns (1 to {})", self.max_columns()));
        }
        if cols > 1 && (!x_stride.is_multiple_of(x_align) || x_stride < self.x_bytes()) {
            return bad(format!(
                "an x column stride of {x_stride} bytes (a multiple of {x_align}, at least {})",
                self.x_bytes()
            ));
        }
        if cols > 1 && (!y_stride.is_multiple_of(4) || y_stride < self.m * 4) {
            return bad(format!(
                "a y column stride of {y_stride} bytes (a multiple of 4, at least {})",
                self.m * 4
            ));
        }
        // One column binds x as it always did: at most x_bytes of what it is given.
        let x_cover = (cols - 1) * x_stride + self.x_bytes().min(x.size);
        if cols > 1 && x.size < (cols - 1) * x_stride + self.x_bytes() {
            return bad(format!(
                "an x binding of {} bytes for {cols} columns of {x_stride}",
                x.size
            ));
        }
        let y_cover = y_first * 4 + (cols - 1) * y_stride + self.m * 4;
        if cols > 1 && y.size < y_cover {
            return bad(format!(
                "a y binding of {} bytes for {cols} columns of {y_stride} from element {y_first}",
                y.size
            ));
        }
        let u32_of = |v: u64, what: &str| {
            u32::try_from(v).map_err(|_| Error::Invalid(format!("matvec {what} {v} exceeds u32")))
        };
        let x_up = match self.x_form() {
            XForm::Glu { up } => up,
            _ => 0,
        };
        let x = Slice::new(x.buffer, x.offset, x_cover);
        let column_params = [
            u32_of(cols, "columns")?,
            u32_of(x_stride / x_align, "x stride")?,
            u32_of(y_stride / 4, "y stride")?,
        ];
        self.parts
            .iter()
            .zip(weights)
            .map(|(p, w)| {
                let mut params = vec![
                    u32_of(p.rows, "rows")?,
                    u32_of(self.k, "K")?,
                    u32_of(self.row_bytes, "row bytes")?,
                    u32_of(y_first + p.first_row, "first output")?,
                ];
                if self.kernel.family == Family::Dot4 {
                    params.push(u32_of(x_up, "x_up")?);
                }
                params.extend(column_params);
                Ok(Dispatch {
                    pipeline,
                    params,
                    storage: [*w, x, y].into_iter().chain(queue).collect(),
                    workgroups: p.workgroups,
                    bytes_read: p.rows * self.row_bytes + x.size,
                })
            })
            .collect()
    }
}

/// Rows a coop workgroup of `wg` invocations takes per batch: one per subgroup of
/// `subgroup_max`.
pub(crate) fn coop_rows_per_workgroup(wg: u32, subgroup_max: u32) -> u64 {
    (wg / subgroup_max.max(1)).max(1) as u64
}

/// Rows a dot4 workgroup of `wg` invocations takes per batch, with `lanes` lanes per
/// row (0: a whole subgroup of `subgroup_max`).
pub(crate) fn dot4_rows_per_workgroup(wg: u32, lanes: u32, subgroup_max: u32) -> u64 {
    let sg = subgroup_max.max(1);
    let lanes = if lanes == 0 { sg } else { lanes.min(sg) };
    (wg / lanes).max(1) as u64
}

/// Host memory a weight passes through on its way up, at most, where its [`Layout`]
/// keeps each block to itself: its part is arranged and uploaded a piece at a time,
/// through one reused buffer, rather than copied whole (a part may be 2 GiB on the H200).
pub const ARRANGE_PIECE_BYTES: usize = 16 << 20;

/// Bytes `start..start + len` of `tensors` read end to end: borrowed where one tensor
/// holds them all, else gathered.
fn byte_range<'a>(tensors: &[&'a [u8]], start: usize, len: usize) -> std::borrow::Cow<'a, [u8]> {
    let mut skipped = 0;
    let mut gathered = Vec::new();
    for t in tensors {
        let (from, to) = (start.max(skipped), (start + len).min(skipped + t.len()));
        if from < to {
            let bytes = &t[from - skipped..to - skipped];
            if bytes.len() == len {
                return std::borrow::Cow::Borrowed(bytes);
            }
            gathered.extend_from_slice(bytes);
        }
        skipped += t.len();
    }
    std::borrow::Cow::Owned(gathered)
}

/// A new dot4 batch queue. Matvecs may share one: they then run one after another.
pub fn create_queue(device: &dyn Device) -> Result<Slice> {
    let buffer = device.create_buffer("dot4 batch queue", QUEUE_BYTES, BufferUse::Storage)?;
    Ok(Slice::new(buffer, 0, QUEUE_BYTES))
}
