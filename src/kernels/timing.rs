//! Timing one matvec route with GPU timestamps, shared by `benches/matvec.rs` and
//! `examples/compare`: distinct weight copies rotated so no dispatch finds its weights
//! in the last-level cache, a warm-up so the GPU is at its clocks, then timed twice:
//! one timestamp interval per dispatch (each matvec alone in its pass), and one interval
//! over the whole chain of them in one pass. The chained matvecs all write the same y,
//! so each waits for the one before it, as a decode step's dependent dispatches do; the
//! chain's time per matvec leaves out what opening a pass and writing its timestamps
//! costs, which the isolated figure includes.

use std::time::{Duration, Instant};

use crate::device::{BufferUse, CommandList, Device, Slice, Timing};
use crate::kernels::matvec;
use crate::kernels::PipelineCache;
use crate::quant::random_blocks;
use crate::router::Route;

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
    pub copies: usize,
    /// Mean over the chain of dependent matvecs in one pass.
    pub chained_us: f64,
    /// Isolated: one pass per matvec.
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
}

/// Times `route` (a matvec of its M × K) on random weights of its type.
pub fn time_matvec(
    device: &dyn Device,
    cache: &PipelineCache,
    route: &Route,
    effort: Effort,
) -> crate::Result<Times> {
    let (m, k) = (route.m, route.k);
    let weight_bytes = m * route.row_bytes;
    let n_blocks = (m * k) as usize / route.ty.block_size();
    let data = random_blocks(route.ty, n_blocks, m ^ k);
    let copies = effort.rotate_bytes.div_ceil(weight_bytes).clamp(1, 512) as usize;
    let first = matvec::upload_weights(device, "matvec weights", route, &data)?;
    drop(data);
    let mut sets = vec![first.clone()];
    let mut fill = CommandList::new();
    for _ in 1..copies {
        let mut set = Vec::new();
        for s in &first {
            let b = device.create_buffer("weight copy", s.size, BufferUse::Storage)?;
            fill.copy(*s, b, 0);
            set.push(Slice::new(b, 0, s.size));
        }
        sets.push(set);
    }
    device.submit(&fill)?;
    let x_values = vec![0.5f32; k as usize];
    let x_data = if route.x_q8() {
        matvec::quantize_x_q8(&x_values)
    } else {
        bytemuck::cast_slice(&x_values).to_vec()
    };
    let x_bytes = route.x_bytes();
    let xb = device.create_buffer("x", x_bytes, BufferUse::Storage)?;
    device.upload(xb, 0, &x_data)?;
    let yb = device.create_buffer("y", m * 4, BufferUse::Storage)?;
    let pipeline = matvec::pipeline(device, cache, route)?;
    let queue = matvec::queue(device, route)?;
    let (x, y) = (Slice::new(xb, 0, x_bytes), Slice::new(yb, 0, m * 4));

    // Two untimed iterations first: the first dispatches of a list pay for binding.
    const SKIP: usize = 2;
    let iters = effort.iters.max(copies.min(64));
    let mut list = CommandList::new();
    for i in 0..iters + SKIP {
        let weights = &sets[i % copies];
        for d in matvec::dispatches(
            pipeline,
            k,
            route.row_bytes,
            &route.parts,
            weights,
            x,
            y,
            0,
            None,
            queue,
        )? {
            list.dispatch(d);
        }
    }
    let warm_until = Instant::now() + effort.warmup;
    loop {
        device.submit(&list)?;
        device.wait()?;
        if Instant::now() >= warm_until {
            break;
        }
    }
    let per_dispatch = device.submit_timed(&list, Timing::PerDispatch)?;
    let whole_ns: f64 = device.submit_timed(&list, Timing::Whole)?.iter().sum();
    let chained_us = whole_ns / 1e3 / (iters + SKIP) as f64;
    // A tensor split over several bindings is one matvec: sum its parts.
    let mut times: Vec<f64> = per_dispatch
        .chunks(route.parts.len())
        .skip(SKIP)
        .map(|c| c.iter().sum::<f64>() / 1e3)
        .collect();
    times.sort_by(f64::total_cmp);
    for s in sets.iter().flatten() {
        device.destroy_buffer(s.buffer)?;
    }
    if let Some(q) = queue {
        device.destroy_buffer(q.buffer)?;
    }
    device.destroy_buffer(xb)?;
    device.destroy_buffer(yb)?;
    Ok(Times {
        copies,
        chained_us,
        median_us: times[times.len() / 2],
        min_us: times[0],
        max_us: times[times.len() - 1],
    })
}

/// Bytes one matvec moves: the weights, x and y.
pub fn matvec_bytes(route: &Route) -> u64 {
    route.m * route.row_bytes + route.x_bytes() + route.m * 4
}
