//! Timing one matvec route with GPU timestamps, shared by `benches/matvec.rs` and
//! `examples/compare`: distinct weight copies rotated so no dispatch finds its weights
//! in the last-level cache, a warm-up so the GPU is at its clocks, then timed twice:
//! one timestamp interval per dispatch (each matvec alone in its pass), and one interval
//! over the whole chain of them in one pass. The chained matvecs all write the same y,
//! so each waits for the one before it, as a decode step's dependent dispatches do; the
//! chain's time per matvec leaves out what opening a pass and writing its timestamps
//! costs, which the isolated figure includes.
//!
//! [`time_stream_read`] times a pure read of a matvec's weight bytes the same way: the
//! ceiling for that size.

use std::time::{Duration, Instant};

use crate::device::{BufferUse, CommandList, Device, OwnedBuffers, Slice, StreamRead, Timing};
use crate::kernels::attention::{
    AttentionLaunch, AttentionRow, Heads, KvType, Partials, PrefillAttention, PREFILL_STATE_BYTES,
};
use crate::kernels::matmul::{self, MatmulInput, MatmulLaunch, SpanScratch, UnpackedMatmul};
use crate::kernels::matvec;
use crate::kernels::matvec::{MatvecLaunch, XForm};
use crate::kernels::PipelineCache;
use crate::quant::random_blocks;

/// How hard to measure.
#[derive(Clone, Copy, Debug)]
pub struct Effort {
    /// Timed iterations after the warm-up (at least one pass over the copies).
    pub iters: usize,
    /// Bytes of distinct weight copies to rotate through: several times the L2.
    pub rotate_bytes: u64,
    /// GPU work before the timed run: GPUs drop their clocks while the CPU prepares a
    /// case and would otherwise be timed half asleep.
    pub warmup: Duration,
}

/// Per-matvec GPU time, in µs, and how many weight copies were rotated.
#[derive(Clone, Copy, Debug)]
pub struct Times {
    /// Copies of the weights rotated through, so that no run finds them in the cache.
    pub copies: usize,
    /// Mean over the chain of dependent matvecs in one pass.
    pub chained_us: f64,
    /// Isolated: one pass per matvec.
    pub median_us: f64,
    /// The fastest isolated matvec.
    pub min_us: f64,
    /// The slowest isolated matvec.
    pub max_us: f64,
}

/// Times `launch` (a matvec of its M × K) on random weights of its type.
pub fn time_matvec(
    device: &dyn Device,
    cache: &PipelineCache,
    launch: &MatvecLaunch,
    effort: Effort,
) -> crate::Result<Times> {
    time_matvec_columns(device, cache, launch, 1, effort)
}

/// [`time_matvec`] of `cols` columns in one dispatch
/// ([`MatvecLaunch::dispatches_columns`]), x and y columns packed end to end.
pub fn time_matvec_columns(
    device: &dyn Device,
    cache: &PipelineCache,
    launch: &MatvecLaunch,
    cols: u64,
    effort: Effort,
) -> crate::Result<Times> {
    let (m, k, ty) = (launch.m(), launch.k(), launch.kernel().ty);
    // Freed when this returns, whether it times the route or fails half way.
    let buffers = OwnedBuffers::borrowing(device);
    let sets = rotated_weights(device, &buffers, launch, (m, k, ty), (effort, 512))?;
    let copies = sets.len();
    let x_stride = launch.x_bytes().next_multiple_of(16);
    let x_bytes = launch.x_bytes();
    let x_data = match launch.x_form() {
        XForm::Q8 => matvec::quantize_x_q8(&vec![0.5f32; k as usize]),
        // K values, or gate and up.
        XForm::F32 | XForm::Glu { .. } => {
            bytemuck::cast_slice(&vec![0.5f32; (x_bytes / 4) as usize]).to_vec()
        }
    };
    let x_all = (cols - 1) * x_stride + x_bytes;
    let x = Slice::new(buffers.create("x", x_all, BufferUse::Storage)?, 0, x_all);
    for c in 0..cols {
        device.upload(x.buffer, c * x_stride, &x_data)?;
    }
    let y_bytes = cols * m * 4;
    let y = Slice::new(
        buffers.create("y", y_bytes, BufferUse::Storage)?,
        0,
        y_bytes,
    );
    let pipeline = launch.pipeline(device, cache)?;
    let queue = launch.new_queue(device)?;
    if let Some(q) = queue {
        buffers.adopt(q.buffer);
    }

    let iters = effort.iters.max(copies.min(64));
    let mut list = CommandList::new();
    for i in 0..iters + SKIP {
        let weights = &sets[i % copies];
        let ds =
            launch.dispatches_columns(pipeline, weights, x, x_stride, y, m * 4, 0, cols, queue)?;
        for d in ds {
            list.dispatch(d);
        }
    }
    time_list(device, &list, launch.parts().len(), copies, effort)
}

/// Times one layer's decode attention of `launch` over `n_pos` cached positions
/// (random keys and values in its format, copies rotated as for a matvec): the decode
/// dispatch and, where the positions split into several chunks, the combine pass.
pub fn time_attention(
    device: &dyn Device,
    cache: &PipelineCache,
    launch: &AttentionLaunch,
    n_pos: u64,
    decode_only: bool,
    effort: Effort,
) -> crate::Result<Times> {
    let h = launch.heads();
    let buffers = OwnedBuffers::borrowing(device);
    let sets = kv_cache_copies(&buffers, launch.kv(), h, n_pos, effort)?;
    let copies = sets.len();
    let q_bytes = h.n_heads * h.head_dim * 4;
    let q = buffers.create_with(
        "q",
        bytemuck::cast_slice(&vec![0.25f32; (q_bytes / 4) as usize]),
        BufferUse::Storage,
    )?;
    let out = Slice::new(
        buffers.create("out", q_bytes, BufferUse::Storage)?,
        0,
        q_bytes,
    );
    let bytes = launch.part_bytes();
    let part = |label: &str, bytes: u64| -> crate::Result<Slice> {
        Ok(Slice::new(
            buffers.create(label, bytes.max(4), BufferUse::Storage)?,
            0,
            bytes.max(4),
        ))
    };
    let parts = Partials {
        ml: part("partials (m, l)", bytes.ml)?,
        acc: part("partials", bytes.acc)?,
        counts: part("merge counts", bytes.counts)?,
    };
    let row = launch.row(n_pos - 1, 0, None)?;
    let row_table =
        buffers.create_with("row table", AttentionRow::bytes(&[row]), BufferUse::Storage)?;
    let pipelines = launch.pipelines(device, cache)?;
    let combine = || AttentionLaunch::combine_pipeline(device, cache);
    let iters = effort.iters.max(copies.min(64));
    let mut list = CommandList::new();
    let mut per_iter = 0;
    for i in 0..iters + SKIP {
        let (k, v) = sets[i % copies];
        let mut ds = launch.dispatches(
            &pipelines,
            combine,
            0..n_pos,
            row_table,
            q,
            k,
            v,
            parts,
            out,
        )?;
        if decode_only {
            ds.truncate(1);
        }
        per_iter = ds.len();
        ds.into_iter().for_each(|d| list.dispatch(d));
    }
    time_list(device, &list, per_iter, copies, effort)
}

/// Distinct K and V caches of `n_pos` positions of `heads`, as many pairs as `effort`
/// rotates through: values in [-0.5, 0.5) in the cache's format; the scores stay small.
fn kv_cache_copies(
    buffers: &OwnedBuffers,
    kv: KvType,
    heads: Heads,
    n_pos: u64,
    effort: Effort,
) -> crate::Result<Vec<(Slice, Slice)>> {
    let values: Vec<f32> = xorshift(0x9e37_79b9_7f4a_7c15)
        .take((n_pos * heads.kv_dim()) as usize)
        .map(|r| (r & 0x3ff) as f32 / 1024.0 - 0.5)
        .collect();
    let bytes = kv.encode(&values, heads.head_dim as usize);
    let copies = effort
        .rotate_bytes
        .div_ceil(2 * bytes.len().max(1) as u64)
        .clamp(1, 512) as usize;
    let mut sets = Vec::new();
    for _ in 0..copies {
        let k = buffers.create_with("k cache", &bytes, BufferUse::Storage)?;
        let v = buffers.create_with("v cache", &bytes, BufferUse::Storage)?;
        sets.push((k, v));
    }
    Ok(sets)
}

/// The standard deviation of [`kv_cache_copies`]' values (uniform on [-0.5, 0.5)).
const KV_VALUE_STD: f64 = 0.288_675;

/// Times one layer's prefill attention of `launch` for `n_tokens` tokens from position
/// `start` (random keys and values over `start + n_tokens` positions, copies rotated as
/// for decode attention; q rows as tightly packed as the heads allow).
///
/// `score_std` sets how far apart the scores q·k / √d lie: 0 gives every q value 0.25
/// (scores of standard deviation 0.07: a row's running max never moves after its first
/// keys), more gives random q whose scores have that standard deviation. The flash
/// kernel's work depends on it: it rescales its accumulators in the key tiles where
/// some row's max grows by more than its margin, which spread-out scores make common.
pub fn time_prefill_attention(
    device: &dyn Device,
    cache: &PipelineCache,
    launch: &PrefillAttention,
    (start, n_tokens): (u64, u64),
    score_std: f64,
    effort: Effort,
) -> crate::Result<Times> {
    let h = launch.heads();
    let buffers = OwnedBuffers::borrowing(device);
    let sets = kv_cache_copies(&buffers, launch.kv(), h, start + n_tokens, effort)?;
    let copies = sets.len();
    let q_width = h.n_heads * h.head_dim;
    let q_bytes = n_tokens * q_width * 4;
    let q_values: Vec<f32> = match score_std > 0.0 {
        false => vec![0.25; (q_bytes / 4) as usize],
        true => {
            // Uniform values of unit variance, scaled so that q·k / √d has score_std.
            let scale = score_std / KV_VALUE_STD * 12f64.sqrt();
            xorshift(0x2545_f491_4f6c_dd1d)
                .take((q_bytes / 4) as usize)
                .map(|r| (((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * scale) as f32)
                .collect()
        }
    };
    let q = buffers.create_with("q", bytemuck::cast_slice(&q_values), BufferUse::Storage)?;
    let out = Slice::new(
        buffers.create("out", q_bytes, BufferUse::Storage)?,
        0,
        q_bytes,
    );
    let state_bytes = n_tokens * h.n_heads * PREFILL_STATE_BYTES;
    let state = Slice::new(
        buffers.create("state", state_bytes, BufferUse::Storage)?,
        0,
        state_bytes,
    );
    let pipelines = launch.pipelines(device, cache)?;
    let iters = effort.iters.max(copies.min(64));
    let mut list = CommandList::new();
    let mut per_iter = 0;
    for i in 0..iters + SKIP {
        let (k, v) = sets[i % copies];
        let ds = launch.dispatches(
            &pipelines,
            start,
            n_tokens,
            (q, q_width),
            k,
            v,
            (out, q_width),
            state,
            None,
        )?;
        per_iter = ds.len();
        ds.into_iter().for_each(|d| list.dispatch(d));
    }
    time_list(device, &list, per_iter, copies, effort)
}

/// Times `launch` over `n_tokens` tokens on random weights of its type (uploaded as its
/// matvec `matvec` uploads them, copies rotated as for a matvec) and random x in the
/// form it takes (quantized or f32).
pub fn time_matmul(
    device: &dyn Device,
    cache: &PipelineCache,
    matvec: &MatvecLaunch,
    launch: &MatmulLaunch,
    n_tokens: u64,
    effort: Effort,
) -> crate::Result<Times> {
    let (m, k, ty) = (launch.m(), launch.k(), launch.kernel().ty);
    let buffers = OwnedBuffers::borrowing(device);
    let sets = rotated_weights(device, &buffers, matvec, (m, k, ty), (effort, 64))?;
    let copies = sets.len();
    let x_values = bench_x(n_tokens * k);
    let x_data = match launch.input() {
        MatmulInput::Q8 => matvec::quantize_x_q8(&x_values),
        MatmulInput::F32 => bytemuck::cast_slice(&x_values).to_vec(),
    };
    let x = buffers.create_with("x", &x_data, BufferUse::Storage)?;
    let y_bytes = n_tokens * m * 4;
    let y = Slice::new(
        buffers.create("y", y_bytes, BufferUse::Storage)?,
        0,
        y_bytes,
    );
    let pipeline = launch.pipeline(device, cache)?;
    // The decode columns in K spans: their scratch and the sum's pipeline.
    let spans = match launch.engine().k_spans() {
        1 => None,
        _ => {
            let bytes = launch.span_scratch_bytes(n_tokens);
            Some(SpanScratch {
                scratch: Slice::new(
                    buffers.create("span scratch", bytes, BufferUse::Storage)?,
                    0,
                    bytes,
                ),
                sum: matmul::span_sum_pipeline(device, cache)?,
            })
        }
    };
    let iters = effort.iters.max(copies);
    let mut list = CommandList::new();
    let mut per_iter = 0;
    for i in 0..iters + SKIP {
        let weights = &sets[i % copies];
        let stride = launch.x_bytes_per_token();
        let ds = launch.dispatches_with_spans(
            pipeline,
            weights,
            x,
            stride,
            y,
            (0, m),
            n_tokens,
            spans,
        )?;
        per_iter = ds.len();
        ds.into_iter().for_each(|d| list.dispatch(d));
    }
    time_list(device, &list, per_iter, copies, effort)
}

/// `matvec`'s weights (M x K random blocks of `ty`) uploaded, and copied as many times
/// as `effort` rotates through, up to `most`: one set of row-part slices per copy.
fn rotated_weights(
    device: &dyn Device,
    buffers: &OwnedBuffers,
    matvec: &MatvecLaunch,
    (m, k, ty): (u64, u64, crate::quant::GgmlType),
    (effort, most): (Effort, u64),
) -> crate::Result<Vec<Vec<Slice>>> {
    let data = random_blocks(ty, (m * k) as usize / ty.block_size(), m ^ k);
    let copies = effort
        .rotate_bytes
        .div_ceil(matvec.weight_bytes())
        .clamp(1, most) as usize;
    let first = buffers.adopt_all(matvec.upload_weights(device, "weights", &data)?);
    drop(data);
    let mut sets = vec![first.clone()];
    let mut fill = CommandList::new();
    for _ in 1..copies {
        let mut set = Vec::new();
        for s in &first {
            let b = buffers.create("weight copy", s.size, BufferUse::Storage)?;
            fill.copy(*s, b, 0);
            set.push(Slice::new(b, 0, s.size));
        }
        sets.push(set);
    }
    device.submit(&fill)?;
    Ok(sets)
}

/// The three steps of an unpacked matmul, timed apart ([`time_unpacked_matmul`]).
#[derive(Clone, Copy, Debug)]
pub struct UnpackedTimes {
    /// Decoding the weights into rows of CT (once per matrix per batch), over rotated
    /// weight copies.
    pub unpack: Times,
    /// Converting the batch's x (once per x, for every matrix that multiplies it).
    pub unpack_x: Times,
    /// The multiply from the unpacked rows.
    pub gemm: Times,
}

/// Times `unpacked` (over `matvec`'s weights, random of its type) for `n_tokens` tokens,
/// each of its three steps in a run of its own, as [`time_matmul`] times a matmul.
pub fn time_unpacked_matmul(
    device: &dyn Device,
    cache: &PipelineCache,
    matvec: &MatvecLaunch,
    unpacked: &UnpackedMatmul,
    n_tokens: u64,
    effort: Effort,
) -> crate::Result<UnpackedTimes> {
    let (m, k, ty) = (unpacked.m(), unpacked.k(), matvec.kernel().ty);
    let profile = device.profile();
    let buffers = OwnedBuffers::borrowing(device);
    let sets = rotated_weights(device, &buffers, matvec, (m, k, ty), (effort, 64))?;
    let copies = sets.len();
    let x_data = matvec::quantize_x_q8(&bench_x(n_tokens * k));
    let x = buffers.create_with("x", &x_data, BufferUse::Storage)?;
    let scratch = |what, bytes| -> crate::Result<Slice> {
        Ok(Slice::new(
            buffers.create(what, bytes, BufferUse::Storage)?,
            0,
            bytes,
        ))
    };
    let wu = scratch("unpacked weights", unpacked.weight_scratch_bytes())?;
    let xu = scratch("unpacked x", unpacked.x_scratch_bytes(n_tokens))?;
    let y = scratch("y", n_tokens * m * 4)?;
    let [unpack, unpack_x, gemm] = unpacked.pipelines(device, cache)?;
    let iters = effort.iters.max(copies);
    let (mut unpacks, mut xs, mut gemms) =
        (CommandList::new(), CommandList::new(), CommandList::new());
    for i in 0..iters + SKIP {
        for d in unpacked.unpack_dispatches(profile, unpack, &sets[i % copies], wu)? {
            unpacks.dispatch(d);
        }
        let stride = unpacked.x_bytes_per_token();
        xs.dispatch(unpacked.unpack_x_dispatch(profile, unpack_x, x, stride, xu, n_tokens)?);
        gemms.dispatch(unpacked.gemm_dispatch(gemm, (wu, xu), y, (0, m), n_tokens)?);
    }
    Ok(UnpackedTimes {
        unpack: time_list(device, &unpacks, sets[0].len(), copies, effort)?,
        unpack_x: time_list(device, &xs, 1, 1, effort)?,
        gemm: time_list(device, &gemms, 1, 1, effort)?,
    })
}

/// `n` values in [-1, 1) from a fixed xorshift: a bench's x.
fn bench_x(n: u64) -> Vec<f32> {
    xorshift(0x2545_f491_4f6c_dd1d)
        .take(n as usize)
        .map(|r| (r >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect()
}

/// The benches' fixed pseudo-random stream: xorshift64 from `state`, so every run
/// times the same data.
fn xorshift(mut state: u64) -> impl Iterator<Item = u64> {
    std::iter::repeat_with(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    })
}

/// Two untimed iterations first: the first dispatches of a list pay for binding.
const SKIP: usize = 2;

/// Times `list`, SKIP iterations and then timed ones of `per_iter` dispatches each
/// (rotating through `copies` of their data), after warming up: per iteration alone and
/// chained (see the module's comment).
fn time_list(
    device: &dyn Device,
    list: &CommandList,
    per_iter: usize,
    copies: usize,
    effort: Effort,
) -> crate::Result<Times> {
    let warm_until = Instant::now() + effort.warmup;
    loop {
        device.submit(list)?;
        device.wait()?;
        if Instant::now() >= warm_until {
            break;
        }
    }
    let per_dispatch = device.submit_timed(list, Timing::PerDispatch)?;
    let whole_ns: f64 = device.submit_timed(list, Timing::Whole)?.iter().sum();
    let n_iters = per_dispatch.len() / per_iter;
    // An iteration of several dispatches (a tensor split over several bindings) is one
    // matvec: sum its parts.
    let mut times: Vec<f64> = per_dispatch
        .chunks(per_iter)
        .skip(SKIP)
        .map(|c| c.iter().sum::<f64>() / 1e3)
        .collect();
    times.sort_by(f64::total_cmp);
    Ok(Times {
        copies,
        chained_us: whole_ns / 1e3 / n_iters as f64,
        median_us: times[times.len() / 2],
        min_us: times[0],
        max_us: times[times.len() - 1],
    })
}

/// Times the bandwidth probe's streaming read over `bytes`, as [`time_matvec`] times a
/// matvec: rotated copies, alone and chained (each read waits for the one before, as
/// they share their sink); each figure the best of three launch shapes. A matvec moving
/// that many bytes in one dispatch cannot beat it, which makes it the ceiling a
/// matvec's time is held to at its own size, where the probe's rate (over a buffer of
/// up to 1 GiB) leaves out what a dispatch costs before and after its bytes stream.
pub fn time_stream_read(device: &dyn Device, bytes: u64, effort: Effort) -> crate::Result<Times> {
    let bytes = bytes.next_multiple_of(16);
    let read = StreamRead::new(device)?;
    // Past the binding limit, a buffer and a read per binding's worth, as a matvec's
    // row parts.
    let limit = device.profile().usable_binding_bytes();
    let sizes: Vec<u64> = (0..bytes.div_ceil(limit))
        .map(|i| limit.min(bytes - i * limit))
        .collect();
    let copies = effort.rotate_bytes.div_ceil(bytes).clamp(1, 512) as usize;
    let owned = OwnedBuffers::borrowing(device);
    let mut buffers = Vec::new();
    for _ in 0..copies {
        for &size in &sizes {
            buffers.push(Slice::new(
                owned.create("read copy", size, BufferUse::Storage)?,
                0,
                size,
            ));
        }
    }
    let sink = Slice::new(owned.create("read sink", 16, BufferUse::Storage)?, 0, 16);
    let iters = effort.iters.max(copies.min(64));
    // The probe's 16 loads per invocation suit a 1 GiB read; a small one may go faster
    // with fewer, in more workgroups. The fastest of these is the ceiling.
    let mut best: Option<Times> = None;
    for loads in [1, 4, 16] {
        let mut list = CommandList::new();
        for i in 0..iters + SKIP {
            let copy = i % copies;
            for &src in &buffers[copy * sizes.len()..(copy + 1) * sizes.len()] {
                list.dispatch(read.dispatch(src, sink, loads));
            }
        }
        let t = time_list(device, &list, sizes.len(), copies, effort)?;
        best = Some(match best {
            Some(b) => Times {
                median_us: b.median_us.min(t.median_us),
                min_us: b.min_us.min(t.min_us),
                max_us: b.max_us.min(t.max_us),
                chained_us: b.chained_us.min(t.chained_us),
                copies,
            },
            None => t,
        });
    }
    Ok(best.expect("three read shapes timed"))
}
