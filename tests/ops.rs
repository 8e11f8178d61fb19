//! Every op kernel of `kernels::ops` against its f64 CPU reference on the GPU under
//! test (lavapipe in CI).

mod common;

use brass::device::{read_f32, BufferUse, CommandList, Device, Dispatch, Slice};
use brass::kernels::matvec::{quantize_x_q8, Q8_GROUP_BYTES};
use brass::kernels::ops::{self, Activation, EmbedPart, Ops, OpsOn};
use brass::kernels::PipelineCache;

struct Gpu {
    device: brass::device::WgpuDevice,
    cache: PipelineCache,
    ops: Ops,
}

fn setup() -> Gpu {
    setup_with(Activation::Silu)
}

/// The ops of a model whose FFN runs `activation`.
fn setup_with(activation: Activation) -> Gpu {
    Gpu {
        device: common::gpu(),
        cache: PipelineCache::new(),
        ops: Ops::new(activation),
    }
}

impl Gpu {
    fn on(&self) -> OpsOn<'_> {
        self.ops.on(&self.device, &self.cache)
    }

    fn buf(&self, data: &[f32]) -> Slice {
        let bytes = (data.len().max(1) * 4) as u64;
        let b = self
            .device
            .create_buffer("t", bytes, BufferUse::Storage)
            .unwrap();
        if !data.is_empty() {
            self.device
                .upload(b, 0, bytemuck::cast_slice(data))
                .unwrap();
        }
        Slice::new(b, 0, bytes)
    }

    fn zeros(&self, n: usize) -> Slice {
        self.buf(&vec![0.0; n])
    }

    fn run(&self, ds: Vec<Dispatch>) {
        let mut list = CommandList::new();
        ds.into_iter().for_each(|d| list.dispatch(d));
        self.device.submit(&list).unwrap();
    }

    fn get(&self, s: Slice) -> Vec<f32> {
        read_f32(&self.device, s.buffer, s.offset, (s.size / 4) as usize).unwrap()
    }
}

fn assert_close(what: &str, expected: &[f32], actual: &[f32], tol: f32) {
    assert_eq!(expected.len(), actual.len(), "{what}: length");
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        let bound = tol * (1.0 + e.abs());
        assert!((e - a).abs() <= bound, "{what}[{i}]: expected {e}, got {a}");
    }
}

#[test]
fn embed_reads_the_token_from_the_gpu_across_row_parts() {
    let g = setup();
    let (rows, dim) = (50usize, 70usize);
    let table = common::Rng::new(1).vec(rows * dim);
    // Two parts, as for a table beyond the binding limit.
    let split = 23;
    let parts = [
        EmbedPart {
            first_row: 0,
            rows: split as u64,
            table: g.buf(&table[..split * dim]),
        },
        EmbedPart {
            first_row: split as u64,
            rows: (rows - split) as u64,
            table: g.buf(&table[split * dim..]),
        },
    ];
    for token in [0u32, 22, 23, 49] {
        let tok = g
            .device
            .create_buffer("tok", 4, BufferUse::Storage)
            .unwrap();
        g.device.upload(tok, 0, &token.to_le_bytes()).unwrap();
        let out = g.zeros(dim);
        g.run(
            g.on()
                .embed(&parts, (dim as u64, 1), Slice::new(tok, 0, 4), out)
                .unwrap(),
        );
        assert_eq!(
            g.get(out),
            ops::embed_ref(&table, dim, token),
            "token {token}"
        );
    }
}

#[test]
fn rms_norm_matches() {
    let g = setup();
    for n in [1usize, 64, 576, 1000, 4096] {
        let mut rng = common::Rng::new(n as u64);
        let x: Vec<f32> = rng.vec(n).iter().map(|v| v * 3.0).collect();
        let w = rng.vec(n);
        let out = g.zeros(n);
        g.run(vec![g
            .on()
            .rms_norm((n as u64, 1), 1e-5, g.buf(&x), g.buf(&w), (out, None))
            .unwrap()]);
        assert_close(
            &format!("rms_norm n={n}"),
            &ops::rms_norm_ref(&x, &w, 1e-5),
            &g.get(out),
            1e-5,
        );
    }
}

#[test]
fn silu_mul_and_add_rms_norm_match() {
    let g = setup();
    for n in [1usize, 255, 1536, 70_000] {
        let mut rng = common::Rng::new(n as u64 + 3);
        let gate: Vec<f32> = rng.vec(n).iter().map(|v| v * 8.0).collect();
        let up = rng.vec(n);
        let out = g.zeros(n);
        g.run(vec![g
            .on()
            .glu((n as u64, 1, n as u64), g.buf(&gate), g.buf(&up), out)
            .unwrap()]);
        assert_close(
            &format!("silu_mul n={n}"),
            &ops::silu_mul_ref(&gate, &up),
            &g.get(out),
            1e-6,
        );

        // The residual add fused with the norm after it: x is updated in place (the
        // same f32 sums as the reference), out gets the normed copy.
        let x = g.buf(&gate);
        let w = rng.vec(n);
        let normed = g.zeros(n);
        g.run(vec![g
            .on()
            .add_rms_norm(
                (n as u64, 1),
                1e-5,
                (x, g.buf(&up)),
                g.buf(&w),
                (normed, None),
            )
            .unwrap()]);
        let (sum, expected) = ops::add_rms_norm_ref(&gate, &up, &w, 1e-5);
        assert_close(&format!("add n={n}"), &sum, &g.get(x), 0.0);
        assert_close(
            &format!("add_rms_norm n={n}"),
            &expected,
            &g.get(normed),
            1e-5,
        );
    }
}

/// Runs argmax over `logits` with `before` in the token buffer's first word: returns
/// the buffer's words (id, non-finite count, the id before).
fn argmax_words(g: &Gpu, logits: &[f32], before: u32) -> [u32; 3] {
    let words = ops::ARGMAX_TOKEN_WORDS;
    let tok = g
        .device
        .create_buffer("tok", words * 4, BufferUse::Storage)
        .unwrap();
    let stale = [before, u32::MAX, u32::MAX];
    g.device
        .upload(tok, 0, bytemuck::cast_slice(&stale))
        .unwrap();
    let scratch_bytes = ops::ARGMAX_SCRATCH_WORDS * 4;
    let scratch = g
        .device
        .create_buffer("argmax scratch", scratch_bytes, BufferUse::Storage)
        .unwrap();
    let scratch = Slice::new(scratch, 0, scratch_bytes);
    let tok_slice = Slice::new(tok, 0, words * 4);
    g.run(
        g.on()
            .argmax(logits.len() as u64, g.buf(logits), scratch, tok_slice)
            .unwrap()
            .to_vec(),
    );
    let b = g.device.read(tok, 0, words * 4).unwrap();
    bytemuck::pod_read_unaligned(&b)
}

#[test]
fn argmax_picks_the_lowest_index_on_ties() {
    let g = setup();
    let mut cases: Vec<Vec<f32>> = Vec::new();
    cases.push(common::Rng::new(11).vec(49_152));
    // Past the first stage's workgroup cap: several logits per invocation per chunk.
    cases.push(common::Rng::new(13).vec(2_500_000));
    // Ties: the maximum at several indices, in different invocations' strides.
    let mut tied = common::Rng::new(12).vec(10_000);
    // 4_321 and 2_100 sit in different first-stage workgroups.
    for i in [9_999usize, 4_321, 2_100, 777, 778] {
        tied[i] = 5.0;
    }
    cases.push(tied);
    let mut nan = vec![-1.0f32; 300];
    nan[5] = f32::NAN;
    nan[200] = 2.0;
    cases.push(nan);
    cases.push(vec![0.5]);
    for logits in cases {
        assert_eq!(
            argmax_words(&g, &logits, 7)[0],
            ops::argmax_ref(&logits),
            "n = {}",
            logits.len()
        );
    }
}

/// The count of NaN and infinite logits that argmax reads back with the id (what a
/// decode step checks), against `non_finite_ref`; and the id the buffer held before.
#[test]
fn argmax_counts_non_finite_logits_and_keeps_the_embedded_id() {
    let g = setup();
    let mut cases: Vec<(&str, Vec<f32>)> = Vec::new();
    cases.push(("all finite", common::Rng::new(21).vec(49_152)));
    for (what, bad) in [
        ("NaN", f32::NAN),
        ("+Inf", f32::INFINITY),
        ("-Inf", f32::NEG_INFINITY),
    ] {
        // One bad logit, and then one in each of several first-stage workgroups
        // (and several in one invocation's stride).
        let mut one = common::Rng::new(22).vec(49_152);
        one[30_001] = bad;
        cases.push((what, one));
        let mut many = common::Rng::new(23).vec(2_500_000);
        for i in [0usize, 1, 256, 1_024, 2_047, 2_048, 777_777, 2_499_999] {
            many[i] = bad;
        }
        cases.push((what, many));
    }
    cases.push(("all NaN", vec![f32::NAN; 5_000]));
    // A negative NaN (sign bit set) and the largest finite values, which must not count.
    let mut edges = vec![f32::MAX, f32::MIN, f32::MIN_POSITIVE, -0.0];
    edges.push(-f32::NAN);
    cases.push(("edges", edges));
    for (n, (what, logits)) in cases.iter().enumerate() {
        let before = 1_000 + n as u32;
        let [id, bad, kept] = argmax_words(&g, logits, before);
        let ctx = format!("{what}, n = {}", logits.len());
        assert_eq!(bad, ops::non_finite_ref(logits), "{ctx}");
        assert_eq!(id, ops::argmax_ref(logits), "{ctx}");
        assert_eq!(kept, before, "{ctx}");
    }
    assert_eq!(ops::non_finite_ref(&cases[0].1), 0);
    assert_eq!(ops::non_finite_ref(&cases[1].1), 1);
}

/// `q8` as the GPU wrote it matches `quantize_x_q8(values)`: every int8 of the first
/// plane within one step (rounding at a tie may differ), every value of both planes
/// (256 q1 + q2) within two steps of the second, and the scales to f32 precision.
fn assert_q8_of(what: &str, values: &[f32], q8: &[f32]) {
    assert_q8_near(what, values, q8, 1e-6);
}

/// As [`assert_q8_of`], the scales within `scale_rel` of the reference's: for values the
/// GPU computed itself (its exp is not the CPU's).
fn assert_q8_near(what: &str, values: &[f32], q8: &[f32], scale_rel: f32) {
    let gpu: Vec<u8> = q8.iter().flat_map(|v| v.to_le_bytes()).collect();
    let cpu = quantize_x_q8(values);
    assert_eq!(gpu.len(), cpu.len(), "{what}: q8 length");
    // Group layout (matvec/q8_x.wgsl): plane 1 at 0, its tail at 32, plane 2 at 48, the
    // two planes' tail at 80.
    let word = |g: &[u8], at: usize| i32::from_le_bytes(g[at..at + 4].try_into().unwrap());
    let int8 = |g: &[u8], at: usize| g[at] as i8 as i32;
    for (n, (g, c)) in gpu
        .chunks(Q8_GROUP_BYTES as usize)
        .zip(cpu.chunks(Q8_GROUP_BYTES as usize))
        .enumerate()
    {
        for i in 0..32 {
            let (a, b) = (int8(g, i), int8(c, i));
            assert!(
                (a - b).abs() <= 1,
                "{what}: group {n} value {i}: {a} vs {b}"
            );
            let (a, b) = (256 * a + int8(g, 48 + i), 256 * b + int8(c, 48 + i));
            assert!(
                (a - b).abs() <= 2,
                "{what}: group {n} value {i} on both planes: {a} vs {b}"
            );
        }
        for (tail, planes) in [(32usize, 1i32), (80, 2)] {
            let (d_gpu, d_cpu) = (
                f32::from_bits(word(g, tail) as u32),
                f32::from_bits(word(c, tail) as u32),
            );
            assert!(
                (d_gpu - d_cpu).abs() <= scale_rel * d_cpu.abs(),
                "{what}: group {n} scale {d_gpu} vs {d_cpu}"
            );
            // The tail's sums are of the GPU's own int8 values, which may differ from
            // the CPU's by a step at a tie: checked against those, bit for bit.
            let value = |i: usize| match planes {
                1 => int8(g, i),
                _ => 256 * int8(g, i) + int8(g, 48 + i),
            };
            let (s_lo, s_hi) = ((0..16).map(value).sum::<i32>(), (16..32).map(value).sum());
            assert_eq!(
                (word(g, tail + 8), word(g, tail + 12)),
                (s_lo, s_hi),
                "{what}: group {n} sums of {planes} planes"
            );
            assert_eq!(
                f32::from_bits(word(g, tail + 4) as u32).to_bits(),
                (d_gpu * (s_lo + s_hi) as f32).to_bits(),
                "{what}: group {n} d * sum of {planes} planes"
            );
        }
    }
}

/// The norms' q8 variants write the same f32 output, and it quantized as the dot4
/// matvecs stage x, lengths that are and are not multiples of 32.
#[test]
fn q8_norms_also_write_their_output_quantized() {
    let g = setup_with(Activation::Silu);
    for n in [32usize, 576, 1000, 4096, 9000] {
        let mut rng = common::Rng::new(n as u64 + 11);
        let x: Vec<f32> = rng.vec(n).iter().map(|v| v * 3.0).collect();
        let y = rng.vec(n);
        let w = rng.vec(n);
        let (out, q8) = (g.zeros(n), g.zeros(n.div_ceil(32) * 24));
        g.run(vec![g
            .on()
            .rms_norm((n as u64, 1), 1e-5, g.buf(&x), g.buf(&w), (out, Some(q8)))
            .unwrap()]);
        let what = format!("rms_norm_q8 n={n}");
        assert_close(&what, &ops::rms_norm_ref(&x, &w, 1e-5), &g.get(out), 1e-5);
        assert_q8_of(&what, &g.get(out), &g.get(q8));

        let (xb, out, q8) = (g.buf(&x), g.zeros(n), g.zeros(n.div_ceil(32) * 24));
        g.run(vec![g
            .on()
            .add_rms_norm(
                (n as u64, 1),
                1e-5,
                (xb, g.buf(&y)),
                g.buf(&w),
                (out, Some(q8)),
            )
            .unwrap()]);
        let what = format!("add_rms_norm_q8 n={n}");
        assert_close(
            &what,
            &ops::add_rms_norm_ref(&x, &y, &w, 1e-5).1,
            &g.get(out),
            1e-5,
        );
        assert_q8_of(&what, &g.get(out), &g.get(q8));
    }
}

/// silu(gate) * up written quantized, as the dot4 down projection takes it, lengths that
/// are and are not multiples of 32, on a workgroup per eight groups and on three.
#[test]
fn silu_mul_q8_writes_the_glu_quantized() {
    let g = setup_with(Activation::Silu);
    for n in [32usize, 1000, 14_336, 70_000] {
        let mut rng = common::Rng::new(n as u64 + 17);
        let gate: Vec<f32> = rng.vec(n).iter().map(|v| v * 8.0).collect();
        let up = rng.vec(n);
        let (gb, ub) = (g.buf(&gate), g.buf(&up));
        let q8 = g.zeros(n.div_ceil(32) * 24);
        g.run(vec![g
            .on()
            .glu_q8((n as u64, 1, n as u64), gb, ub, q8)
            .unwrap()]);
        let what = format!("silu_mul_q8 n={n}");
        assert_q8_near(&what, &ops::silu_mul_ref(&gate, &up), &g.get(q8), 1e-5);
        // Three workgroups looping over all the groups write the same.
        let looped = g.zeros(n.div_ceil(32) * 24);
        let mut d = g
            .on()
            .glu_q8((n as u64, 1, n as u64), gb, ub, looped)
            .unwrap();
        d.workgroups = [3, 1, 1];
        g.run(vec![d]);
        let bits = |s| {
            g.get(s)
                .iter()
                .map(|v: &f32| v.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(q8), bits(looped), "{what} on 3 workgroups");
    }
}

/// The prefill batch's ops: each row of a batch is bit for bit what the decode op
/// writes for that row alone (the same WGSL), rows read out of wider ones where the op
/// takes a stride, lengths that are and are not multiples of 32.
#[test]
fn batch_ops_match_the_decode_ops_row_by_row() {
    let g = setup_with(Activation::Silu);
    let bits = |v: Vec<f32>| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let rows = 5usize;
    for n in [576usize, 1000] {
        let groups = n.div_ceil(32);
        let mut rng = common::Rng::new(n as u64 + 23);
        let x: Vec<f32> = rng.vec(rows * n).iter().map(|v| v * 3.0).collect();
        let y = rng.vec(rows * n);
        let w = rng.vec(n);
        let wb = g.buf(&w);

        let (xb, out, q8) = (g.buf(&x), g.zeros(rows * n), g.zeros(rows * groups * 24));
        g.run(vec![g
            .on()
            .rms_norm((n as u64, rows as u64), 1e-5, xb, wb, {
                let (o, q) = (out, q8);
                (o, Some(q))
            })
            .unwrap()]);
        let (xb2, out2, q82) = (g.buf(&x), g.zeros(rows * n), g.zeros(rows * groups * 24));
        g.run(vec![g
            .on()
            .add_rms_norm((n as u64, rows as u64), 1e-5, (xb2, g.buf(&y)), wb, {
                let (o, q) = (out2, q82);
                (o, Some(q))
            })
            .unwrap()]);
        let (batch_norm, batch_q8) = (g.get(out), g.get(q8));
        let (batch_add, batch_add_q8, batch_x) = (g.get(out2), g.get(q82), g.get(xb2));
        for r in 0..rows {
            let what = format!("n={n} row {r}");
            let row = &x[r * n..][..n];
            let (one, one_q8) = (g.zeros(n), g.zeros(groups * 24));
            g.run(vec![g
                .on()
                .rms_norm((n as u64, 1), 1e-5, g.buf(row), wb, (one, Some(one_q8)))
                .unwrap()]);
            assert_eq!(
                bits(g.get(one)),
                bits(batch_norm[r * n..][..n].to_vec()),
                "rms_norm {what}"
            );
            assert_eq!(
                bits(g.get(one_q8)),
                bits(batch_q8[r * groups * 24..][..groups * 24].to_vec()),
                "rms_norm q8 {what}"
            );
            let (rx, one, one_q8) = (g.buf(row), g.zeros(n), g.zeros(groups * 24));
            let ry = g.buf(&y[r * n..][..n]);
            g.run(vec![g
                .on()
                .add_rms_norm((n as u64, 1), 1e-5, (rx, ry), wb, (one, Some(one_q8)))
                .unwrap()]);
            assert_eq!(
                bits(g.get(rx)),
                bits(batch_x[r * n..][..n].to_vec()),
                "add {what}"
            );
            assert_eq!(
                bits(g.get(one)),
                bits(batch_add[r * n..][..n].to_vec()),
                "add_rms_norm {what}"
            );
            assert_eq!(
                bits(g.get(one_q8)),
                bits(batch_add_q8[r * groups * 24..][..groups * 24].to_vec()),
                "add_rms_norm q8 {what}"
            );
        }

        // silu(gate) * up and plain quantization of rows inside wider ones: gate at 0 and
        // up at `n + 8` of each row of 2n + 8 elements.
        let stride = 2 * n + 8;
        let wide = rng.vec(rows * stride);
        let wide_b = g.buf(&wide);
        let q8 = g.zeros(rows * groups * 24);
        // In the model the up half is bound at its own offset of the same buffer; here
        // it is a copy laid out the same way, every row `stride` long.
        let ups: Vec<f32> = (0..rows)
            .flat_map(|r| {
                let mut row = wide[r * stride + n + 8..][..n].to_vec();
                row.resize(stride, 0.0);
                row
            })
            .collect();
        let ups_b = g.buf(&ups);
        g.run(vec![g
            .on()
            .glu_q8((n as u64, rows as u64, stride as u64), wide_b, ups_b, q8)
            .unwrap()]);
        let glu = g.zeros(rows * n);
        g.run(vec![g
            .on()
            .glu((n as u64, rows as u64, stride as u64), wide_b, ups_b, glu)
            .unwrap()]);
        let qx = g.zeros(rows * groups * 24);
        g.run(vec![g
            .on()
            .quantize_rows((n as u64, rows as u64, stride as u64), wide_b, qx)
            .unwrap()]);
        let (got_glu, got_x, got_glu_f32) = (g.get(q8), g.get(qx), g.get(glu));
        for r in 0..rows {
            let gate = &wide[r * stride..][..n];
            let up = &ups[r * stride..][..n];
            let what = format!("n={n} row {r}");
            let glu_q8 = &got_glu[r * groups * 24..][..groups * 24];
            let (gb, ub, one) = (g.buf(gate), g.buf(up), g.zeros(groups * 24));
            g.run(vec![g
                .on()
                .glu_q8((n as u64, 1, n as u64), gb, ub, one)
                .unwrap()]);
            assert_eq!(
                bits(g.get(one)),
                bits(glu_q8.to_vec()),
                "silu_mul_q8 {what}"
            );
            let one = g.zeros(n);
            g.run(vec![g
                .on()
                .glu((n as u64, 1, n as u64), gb, ub, one)
                .unwrap()]);
            assert_eq!(
                bits(g.get(one)),
                bits(got_glu_f32[r * n..][..n].to_vec()),
                "silu_mul {what}"
            );
            assert_q8_near(
                &format!("quantize_rows {what}"),
                gate,
                &got_x[r * groups * 24..][..groups * 24],
                1e-6,
            );
        }
    }

    // Embedding rows: each row of the batch its own token, across two table parts.
    let (vocab, dim) = (40usize, 70usize);
    let table = common::Rng::new(3).vec(vocab * dim);
    let parts = [
        EmbedPart {
            first_row: 0,
            rows: 17,
            table: g.buf(&table[..17 * dim]),
        },
        EmbedPart {
            first_row: 17,
            rows: (vocab - 17) as u64,
            table: g.buf(&table[17 * dim..]),
        },
    ];
    let tokens = [3u32, 39, 17, 16, 0, 3];
    let tok = g
        .device
        .create_buffer("tokens", 4 * tokens.len() as u64, BufferUse::Storage)
        .unwrap();
    g.device
        .upload(tok, 0, bytemuck::cast_slice(&tokens))
        .unwrap();
    let out = g.zeros(tokens.len() * dim);
    let tok_slice = Slice::new(tok, 0, 4 * tokens.len() as u64);
    g.run(
        g.on()
            .embed(&parts, (dim as u64, tokens.len() as u64), tok_slice, out)
            .unwrap(),
    );
    let expected: Vec<f32> = tokens
        .iter()
        .flat_map(|&t| ops::embed_ref(&table, dim, t))
        .collect();
    assert_eq!(g.get(out), expected);
}

/// GELU(gate) * up (Gemma's GeGLU), f32 and quantized, against the f64 tanh form:
/// gates out to +-40, where tanh saturates (and a naive tanh would overflow to NaN).
#[test]
fn gelu_mul_matches_in_f32_and_quantized() {
    let g = setup_with(Activation::GeluTanh);
    for n in [1usize, 32, 1000, 70_000] {
        let mut rng = common::Rng::new(n as u64 + 23);
        let gate: Vec<f32> = rng.vec(n).iter().map(|v| v * 40.0).collect();
        let up = rng.vec(n);
        let (gb, ub) = (g.buf(&gate), g.buf(&up));
        let expected = ops::glu_ref(Activation::GeluTanh, &gate, &up);
        let out = g.zeros(n);
        g.run(vec![g
            .on()
            .glu((n as u64, 1, n as u64), gb, ub, out)
            .unwrap()]);
        assert_close(&format!("gelu_mul n={n}"), &expected, &g.get(out), 1e-6);
        let q8 = g.zeros(n.div_ceil(32) * 24);
        g.run(vec![g
            .on()
            .glu_q8((n as u64, 1, n as u64), gb, ub, q8)
            .unwrap()]);
        assert_q8_near(&format!("gelu_mul_q8 n={n}"), &expected, &g.get(q8), 1e-5);
    }
    // Small gates, where GELU differs most from silu.
    let gate: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect();
    let up = vec![1.0; 64];
    let out = g.zeros(64);
    g.run(vec![g
        .on()
        .glu((64, 1, 64), g.buf(&gate), g.buf(&up), out)
        .unwrap()]);
    let expected = ops::glu_ref(Activation::GeluTanh, &gate, &up);
    assert_close("gelu_mul near 0", &expected, &g.get(out), 1e-6);
    assert!(
        (expected[40] - 0.841_192).abs() < 1e-5,
        "gelu(1) = {}",
        expected[40]
    );
}

/// Per-head RMSNorm of q and k in place: heads of 64, 128 and 256 values (one
/// workgroup of 64 each), GQA 1, 4 and 7, k at an aligned offset after q, rows of a
/// batch `stride` apart; what lies between and around the heads is left as it was.
#[test]
fn head_rms_norm_matches_per_head() {
    let g = setup_with(Activation::Silu);
    for (n_q, n_kv, hd, rows) in [
        (4usize, 1usize, 256usize, 1usize),
        (8, 2, 128, 3),
        (7, 7, 64, 2),
        (14, 2, 100, 1),
    ] {
        let q_dim = n_q * hd;
        let k_first: usize = (q_dim + 60usize).next_multiple_of(64);
        let v_first = k_first + n_kv * hd;
        let stride = if rows == 1 {
            0
        } else {
            v_first + n_kv * hd + 5
        };
        let len = stride.max(v_first + n_kv * hd) * rows.max(1);
        let mut rng = common::Rng::new((n_q * 1000 + hd) as u64);
        let before: Vec<f32> = rng.vec(len).iter().map(|v| v * 5.0).collect();
        let w: Vec<f32> = rng.vec(2 * hd);
        let qkv = g.buf(&before);
        g.run(vec![g
            .on()
            .head_rms_norm(
                (n_q as u64, n_kv as u64, hd as u64),
                k_first as u64,
                1e-6,
                (rows as u64, stride as u64),
                qkv,
                g.buf(&w),
            )
            .unwrap()]);
        let mut expected = before.clone();
        for r in 0..rows {
            let row = r * stride;
            for (first, n, w) in [(0, q_dim, &w[..hd]), (k_first, n_kv * hd, &w[hd..])] {
                let at = row + first..row + first + n;
                let normed = ops::head_rms_norm_ref(&before[at.clone()], w, 1e-6);
                expected[at].copy_from_slice(&normed);
            }
        }
        let what = format!("head_rms_norm {n_q}/{n_kv} heads of {hd}, {rows} rows");
        assert_close(&what, &expected, &g.get(qkv), 1e-5);
    }
}
