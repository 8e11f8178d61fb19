//! RoPE with the KV-cache append, and split-K decode attention, against their f64 CPU
//! references on the GPU under test (lavapipe in CI, at subgroup sizes 4, 8 and 16):
//! both kernels (subgroups and portable), both cache formats; and their batched forms
//! for prompts (rope_kv_batch, causal prefill attention).

mod common;
#[path = "common/coop_emulation.rs"]
mod coop_emulation;

use brass::device::{
    read_f32, BufferUse, CommandList, Device, DeviceProfile, Dispatch, IndexChecks, PipelineId,
    Slice, PRESETS,
};
use brass::kernels::attention::{
    attention_ref, rope_ref, rope_table, rope_table_scaled, AttentionLaunch, AttentionPipelines,
    AttentionRow, DecodeKernel, Heads, KvType, Merge, NoMatrixAttention, Partials,
    PrefillAttention, PrefillPipelines, RopeStyle, PREFILL_STATE_BYTES,
};
use brass::kernels::PipelineCache;
use brass::router::{route_attention, AttentionQuery, Overrides};

use common::bits;

struct Gpu {
    device: brass::device::WgpuDevice,
    cache: PipelineCache,
}

impl Gpu {
    fn new() -> Gpu {
        Gpu {
            device: common::gpu(),
            cache: PipelineCache::new(),
        }
    }

    fn bytes(&self, data: &[u8]) -> Slice {
        let bytes = data.len().max(4) as u64;
        let b = self
            .device
            .create_buffer("t", bytes, BufferUse::Storage)
            .unwrap();
        if !data.is_empty() {
            self.device.upload(b, 0, data).unwrap();
        }
        Slice::new(b, 0, bytes)
    }

    fn buf(&self, data: &[f32]) -> Slice {
        self.bytes(bytemuck::cast_slice(data))
    }

    fn zeros(&self, n_bytes: u64) -> Slice {
        self.bytes(&vec![0u8; n_bytes as usize])
    }

    /// A row table holding `rows`.
    fn rows(&self, rows: &[AttentionRow]) -> Slice {
        self.bytes(AttentionRow::bytes(rows))
    }

    /// The one-row table of a lone step of `launch` at `pos` over `positions`.
    fn row_over(&self, launch: &AttentionLaunch, positions: std::ops::Range<u64>) -> Slice {
        let window = positions.end - positions.start;
        self.rows(&[launch.row(positions.end - 1, 0, Some(window)).unwrap()])
    }

    /// Rows of `head_dim` values in a cache of format `kv`, as rope_kv writes them.
    fn cache(&self, kv: KvType, values: &[f32], head_dim: usize) -> Slice {
        self.bytes(&kv.encode(values, head_dim))
    }

    /// The first `n` values of a cache of rows of `head_dim` back as f32.
    fn read_cache(&self, kv: KvType, s: Slice, n: usize, head_dim: usize) -> Vec<f32> {
        let rows = n / head_dim;
        let bytes = rows as u64 * kv.row_bytes(head_dim as u64);
        let raw = self.device.read(s.buffer, s.offset, bytes).unwrap();
        kv.decode(&raw, head_dim, rows)
    }

    fn get(&self, s: Slice) -> Vec<f32> {
        read_f32(&self.device, s.buffer, s.offset, (s.size / 4) as usize).unwrap()
    }

    fn run(&self, ds: Vec<Dispatch>) {
        let mut list = CommandList::new();
        ds.into_iter().for_each(|d| list.dispatch(d));
        self.device.submit(&list).unwrap();
    }

    fn pipelines(&self, launch: &AttentionLaunch) -> AttentionPipelines {
        launch.pipelines(&self.device, &self.cache).unwrap()
    }

    /// Zeroed partials for `launch`'s largest split.
    fn parts(&self, launch: &AttentionLaunch) -> Partials {
        let bytes = launch.part_bytes();
        Partials {
            ml: self.zeros(bytes.ml),
            acc: self.zeros(bytes.acc),
            counts: self.zeros(bytes.counts),
        }
    }

    /// Decode attention of `q` (every query head's row) over the first `n_pos` rows of
    /// the caches by `launch`, its output read back.
    fn decode(
        &self,
        launch: &AttentionLaunch,
        q: &[f32],
        kc: Slice,
        vc: Slice,
        n_pos: usize,
    ) -> Vec<f32> {
        let p = self.pipelines(launch);
        let out = self.zeros(q.len() as u64 * 4);
        let ds = launch
            .dispatches(
                &p,
                || self.combine(),
                0..n_pos as u64,
                self.row_over(launch, 0..n_pos as u64),
                self.buf(q),
                kc,
                vc,
                self.parts(launch),
                out,
            )
            .unwrap();
        self.run(ds);
        self.get(out)
    }

    /// Prefill attention of `n_tokens` tokens from `start` by `launch` (q rows `q_stride`
    /// apart in `q`, the caches holding every position up to the last token's): its
    /// output, written over NaN so a row the kernel skips fails, and its dispatches.
    #[allow(clippy::too_many_arguments)]
    fn prefill(
        &self,
        launch: &PrefillAttention,
        (start, n_tokens): (usize, usize),
        (q, q_stride): (Slice, usize),
        kc: Slice,
        vc: Slice,
        window: Option<u64>,
    ) -> (Vec<f32>, usize) {
        let h = launch.heads();
        let q_dim = (h.n_heads * h.head_dim) as usize;
        let p = launch.pipelines(&self.device, &self.cache).unwrap();
        let out = self.buf(&vec![f32::NAN; n_tokens * q_dim]);
        let ds = launch
            .dispatches(
                &p,
                start as u64,
                n_tokens as u64,
                (q, q_stride as u64),
                kc,
                vc,
                (out, q_dim as u64),
                self.zeros(prefill_state_bytes(h, n_tokens)),
                window,
            )
            .unwrap();
        let n_dispatches = ds.len();
        self.run(ds);
        (self.get(out), n_dispatches)
    }

    fn combine(&self) -> brass::Result<PipelineId> {
        AttentionLaunch::combine_pipeline(&self.device, &self.cache)
    }

    /// Both kernels where the device has subgroups (the portable one only where not),
    /// the subgroup one with both merges (the route's, and the other), for `heads` over
    /// `n_ctx` positions spread over about `target` workgroups; none where the format
    /// cannot hold such heads (q8_0 heads not whole blocks), which
    /// `q8_0_cache_refuses_heads_that_are_not_whole_blocks` checks.
    fn launches(&self, heads: Heads, kv: KvType, n_ctx: u64, target: u64) -> Vec<AttentionLaunch> {
        if kv.check_head_dim(heads.head_dim).is_err() {
            return Vec::new();
        }
        let routed = route_attention(
            self.device.profile(),
            &AttentionQuery { heads, kv, n_ctx },
            &Overrides {
                attention_workgroups: Some(target),
                ..Overrides::default()
            },
        )
        .unwrap()
        .launch()
        .clone();
        let portable = AttentionLaunch::portable(heads, kv, n_ctx, target).unwrap();
        match routed.kernel() {
            DecodeKernel::Subgroup { .. } => {
                let other = match routed.merge() {
                    Merge::LastWorkgroup => Merge::CombinePass,
                    Merge::CombinePass => Merge::LastWorkgroup,
                };
                let other = routed.clone().with_merge(other).unwrap();
                vec![routed, other, portable]
            }
            DecodeKernel::Portable { .. } => vec![portable],
        }
    }
}

fn heads(n_heads: usize, n_kv: usize, head_dim: usize, rope_dim: usize) -> Heads {
    heads_with(n_heads, n_kv, head_dim, rope_dim, RopeStyle::Normal)
}

fn heads_with(
    n_heads: usize,
    n_kv: usize,
    head_dim: usize,
    rope_dim: usize,
    rope: RopeStyle,
) -> Heads {
    Heads {
        n_heads: n_heads as u64,
        n_kv_heads: n_kv as u64,
        head_dim: head_dim as u64,
        rope_dim: rope_dim as u64,
        rope,
    }
}

/// Every (rope mode, with biases) case rope_kv takes: llama's (no bias), qwen2's.
const ROPE_CASES: [(RopeStyle, bool); 3] = [
    (RopeStyle::Normal, false),
    (RopeStyle::Neox, true),
    (RopeStyle::Neox, false),
];

fn assert_close(what: &str, expected: &[f32], actual: &[f32], tol: f32) {
    assert_eq!(expected.len(), actual.len(), "{what}: length");
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        let bound = tol * (1.0 + e.abs());
        assert!((e - a).abs() <= bound, "{what}[{i}]: expected {e}, got {a}");
    }
}

/// The largest |expected - actual|.
fn max_error(expected: &[f32], actual: &[f32]) -> f32 {
    expected
        .iter()
        .zip(actual)
        .map(|(e, a)| (e - a).abs())
        .fold(0.0, f32::max)
}

/// What a cache of format `kv` holds for rows of `head_dim` values.
fn stored(kv: KvType, values: &[f32], head_dim: usize) -> Vec<f32> {
    values
        .chunks(head_dim)
        .flat_map(|row| kv.stored_row(row))
        .collect()
}

/// How far a value rope_kv wrote may be from the reference's, relative: f32 within a
/// rounding of the rotation; f16 within one f16 step; q8_0 within one step of its
/// block's scale (max |x| / 127: the GPU's 1 / d may round a tie the other way).
fn cache_tolerance(kv: KvType) -> f32 {
    match kv {
        KvType::F32 => 1e-6,
        KvType::F16 => 1e-3,
        KvType::Q8_0 => 1.6e-2,
    }
}

/// How far decode or prefill attention over a cache of format `kv` may be from exact
/// math (unit-scale values, scores of a few units): f16 rounds each K and V value by up
/// to 2^-11 relative, q8_0 by up to 1/254 of its block's largest.
fn exact_bound(kv: KvType) -> f32 {
    match kv {
        KvType::F32 => 2e-5,
        KvType::F16 => 1e-3,
        KvType::Q8_0 => 1e-2,
    }
}

/// [q; pad; k; pad; v] as the model lays them out in one buffer, and where k and v start.
fn qkv_buffer(q: &[f32], k: &[f32], v: &[f32], pad: usize) -> (Vec<f32>, (u64, u64)) {
    let k_first = q.len() + pad;
    let v_first = k_first + k.len() + pad;
    let mut all = vec![f32::NAN; v_first + v.len()];
    all[..q.len()].copy_from_slice(q);
    all[k_first..k_first + k.len()].copy_from_slice(k);
    all[v_first..].copy_from_slice(v);
    (all, (k_first as u64, v_first as u64))
}

/// rope_kv adds the biases and rotates q in place and k into the key cache as the f64
/// reference does (adjacent pairs and NEOX halves), and copies v (plus its bias) into
/// the value cache, in each format: full and partial rotation, GQA, k and v right
/// after q or after padding (the model aligns them for binding; the padding is NaN in
/// q, k, v and the bias, so reading it would show), the first and a late row.
#[test]
fn rope_kv_matches_the_rope_reference() {
    let g = Gpu::new();
    let base = 100_000.0;
    for (kv, (rope, biased)) in KvType::ALL
        .into_iter()
        .flat_map(|kv| ROPE_CASES.map(|case| (kv, case)))
    {
        // (heads, kv heads, head_dim, rope_dim, padding between q, k and v)
        for (n_heads, n_kv, head_dim, rope_dim, pad) in [
            (9usize, 3usize, 64usize, 64usize, 0usize),
            (3, 3, 64, 32, 8),
            (2, 1, 128, 128, 0),
            (4, 2, 18, 10, 3),
        ] {
            let n_pos = 300;
            let kv_dim = n_kv * head_dim;
            let h = heads_with(n_heads, n_kv, head_dim, rope_dim, rope);
            let Ok(launch) = AttentionLaunch::portable(h, kv, n_pos as u64, 8) else {
                assert_eq!(kv, KvType::Q8_0, "{n_heads}/{n_kv}x{head_dim}");
                continue;
            };
            let p = g.pipelines(&launch);
            let table = g.buf(&rope_table(base, rope_dim, n_pos));
            for pos in [0usize, 1, 17, 299] {
                let mut rng = common::Rng::new(pos as u64 + 7);
                let (q, k, v) = (
                    rng.vec(n_heads * head_dim),
                    rng.vec(kv_dim),
                    rng.vec(kv_dim),
                );
                let (bq, bk, bv) = match biased {
                    true => (rng.vec(q.len()), rng.vec(kv_dim), rng.vec(kv_dim)),
                    false => (vec![0.0; q.len()], vec![0.0; kv_dim], vec![0.0; kv_dim]),
                };
                let (all, firsts) = qkv_buffer(&q, &k, &v, pad);
                let (bias, _) = qkv_buffer(&bq, &bk, &bv, pad);
                let qkv = g.buf(&all);
                let (kc, vc) = (g.zeros(launch.cache_bytes()), g.zeros(launch.cache_bytes()));
                g.run(vec![launch
                    .rope_kv(
                        &p,
                        pos as u64,
                        g.row_over(&launch, 0..pos as u64 + 1),
                        table,
                        (qkv, g.buf(&bias)),
                        firsts,
                        kc,
                        vc,
                    )
                    .unwrap()]);
                let ctx = format!(
                    "rope_kv {kv} {rope:?} bias {biased} {n_heads}/{n_kv}x{head_dim}/{rope_dim} \
                     pad {pad} pos {pos}"
                );
                let out = g.get(qkv);
                let plus = |x: &[f32], b: &[f32]| {
                    x.iter().zip(b).map(|(x, b)| x + b).collect::<Vec<f32>>()
                };
                let (q, k, v) = (plus(&q, &bq), plus(&k, &bk), plus(&v, &bv));
                let expected_q = rope_ref(&q, n_heads, head_dim, rope_dim, rope, pos, base);
                assert_close(&format!("{ctx}: q"), &expected_q, &out[..q.len()], 1e-6);
                // k and v themselves are left as they were.
                assert_eq!(
                    &out[firsts.0 as usize..firsts.0 as usize + kv_dim],
                    &all[firsts.0 as usize..firsts.0 as usize + kv_dim],
                    "{ctx}"
                );
                let all_rows = |c: Slice| g.read_cache(kv, c, n_pos * kv_dim, head_dim);
                let row = |c: Slice| all_rows(c)[pos * kv_dim..(pos + 1) * kv_dim].to_vec();
                let stored = |x: &[f32]| stored(kv, x, head_dim);
                let expected_k = stored(&rope_ref(&k, n_kv, head_dim, rope_dim, rope, pos, base));
                let tol = cache_tolerance(kv);
                assert_close(&format!("{ctx}: k row"), &expected_k, &row(kc), tol);
                match kv {
                    KvType::Q8_0 => {
                        assert_close(&format!("{ctx}: v row"), &stored(&v), &row(vc), tol)
                    }
                    _ => assert_eq!(row(vc), stored(&v), "{ctx}: v row"),
                }
                let written = |c: Slice| all_rows(c).iter().filter(|&&x| x != 0.0).count();
                assert!(
                    written(kc) <= kv_dim && written(vc) <= kv_dim,
                    "{ctx}: other rows"
                );
            }
        }
    }
}

/// Split-K decode attention against the f64 reference of the values the cache holds:
/// one position, a few, a partial block, a thousand and nine thousand (many chunks);
/// head sizes 64, 128 and 256; GQA ratios 1, 4 and 7; a target of few workgroups (long
/// chunks) and of many (chunks of the minimum); both kernels and both formats.
#[test]
fn decode_attention_matches_the_reference() {
    let g = Gpu::new();
    let mut cases = 0;
    let mut worst = [0f32; 3];
    for kv in KvType::ALL {
        // Heads of 32 are fewer 16-byte words than a team's four lanes in q8_0 (two) and
        // f16 (four), so some lanes of a team read nothing.
        for (n_heads, n_kv, hd) in [
            (4usize, 4usize, 64usize),
            (8, 2, 128),
            (7, 1, 256),
            (2, 1, 32),
        ] {
            for n_pos in [1usize, 2, 31, 1000, 9000] {
                let kv_dim = n_kv * hd;
                let mut rng = common::Rng::new((n_heads * 7919 + n_pos * 31 + hd) as u64);
                let k = rng.vec(n_pos * kv_dim);
                let v = rng.vec(n_pos * kv_dim);
                // Scores of a few units: softmax weights spread over many positions and
                // peaked on some.
                let q: Vec<f32> = rng.vec(n_heads * hd).iter().map(|x| x * 2.0).collect();
                let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
                let expected = attention_ref(&q, &ks, &vs, n_heads, n_kv, hd, n_pos);
                let exact = attention_ref(&q, &k, &v, n_heads, n_kv, hd, n_pos);
                let (kc, vc) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd));
                for target in [8u64, 512] {
                    for launch in g.launches(heads(n_heads, n_kv, hd, hd), kv, n_pos as u64, target)
                    {
                        let actual = g.decode(&launch, &q, kc, vc, n_pos);
                        let split = launch.split(n_pos as u64);
                        let ctx = format!(
                            "{} {kv} {n_heads}/{n_kv}x{hd} over {n_pos} ({} chunks of {})",
                            launch.pipeline_key(),
                            split.n_chunks,
                            split.chunk
                        );
                        assert_close(&ctx, &expected, &actual, 2e-5);
                        let bound = exact_bound(kv);
                        let err = max_error(&exact, &actual);
                        assert!(err <= bound, "{ctx}: {err} from exact math");
                        worst[kv as usize] = worst[kv as usize].max(err);
                        cases += 1;
                    }
                }
            }
        }
    }
    eprintln!("worst error from exact math (f32, f16, q8_0): {worst:?}");
    let kernels = g.launches(heads(4, 4, 64, 64), KvType::F16, 1, 8).len();
    assert_eq!(cases, 3 * 4 * 5 * 2 * kernels);
}

/// Sliding-window decode attention (Gemma's local layers): the dispatch covers the
/// cache rows first..n_pos only, against the reference over those rows. Windows of
/// one position, of a partial chunk, of many chunks, and one as long as the cache;
/// both kernels, both formats, few workgroups and many.
#[test]
fn decode_attention_over_a_window_matches_the_reference() {
    let g = Gpu::new();
    let (n_heads, n_kv, hd) = (4usize, 1usize, 256usize);
    let kv_dim = n_kv * hd;
    for kv in KvType::ALL {
        for (n_pos, first) in [(1000usize, 999usize), (600, 88), (9000, 8488), (31, 0)] {
            let mut rng = common::Rng::new((n_pos * 13 + first) as u64);
            let k = rng.vec(n_pos * kv_dim);
            let v = rng.vec(n_pos * kv_dim);
            let q: Vec<f32> = rng.vec(n_heads * hd).iter().map(|x| x * 2.0).collect();
            let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
            let seen = n_pos - first;
            let rows = first * kv_dim..;
            let expected = attention_ref(&q, &ks[rows.clone()], &vs[rows], n_heads, n_kv, hd, seen);
            let (kc, vc) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd));
            for target in [8u64, 512] {
                for launch in g.launches(heads(n_heads, n_kv, hd, hd), kv, n_pos as u64, target) {
                    let p = g.pipelines(&launch);
                    let parts = g.parts(&launch);
                    let out = g.zeros((n_heads * hd * 4) as u64);
                    let positions = first as u64..n_pos as u64;
                    let ds = launch
                        .dispatches(
                            &p,
                            || g.combine(),
                            positions.clone(),
                            g.row_over(&launch, positions),
                            g.buf(&q),
                            kc,
                            vc,
                            parts,
                            out,
                        )
                        .unwrap();
                    g.run(ds);
                    let ctx = format!(
                        "{} {kv} window {first}..{n_pos} ({} chunks)",
                        launch.pipeline_key(),
                        launch.split(seen as u64).n_chunks
                    );
                    assert_close(&ctx, &expected, &g.get(out), 2e-5);
                }
            }
        }
    }
}

/// Causal prefill attention of a local layer: each token sees only its last `window`
/// positions, against the reference over those cache rows. Windows of one position, of
/// less than a key tile, of several tiles, and one longer than the cache; tokens
/// starting at 0 and deep into the cache; each format; the device's launch, one with
/// short key passes (so a window crosses pass boundaries) and the sliced tiny launch.
#[test]
fn prefill_attention_over_a_window_matches_the_reference() {
    let g = Gpu::new();
    let profile = g.device.profile();
    for kv in KvType::ALL {
        for (n_heads, n_kv, hd) in [(4usize, 1usize, 256usize), (8, 2, 64)] {
            let h = heads(n_heads, n_kv, hd, hd);
            let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
            let own = PrefillAttention::new(h, kv, profile).unwrap();
            let mut launches = vec![own.clone(), own.with_loop_limit(Some(16_384)).unwrap()];
            launches.extend(prefill_launches(&g, h, kv).into_iter().skip(1));
            for (start, n_tokens, window) in [
                (0usize, 40usize, 1usize),
                (0, 64, 20),
                (1000, 48, 100),
                (1500, 70, 512),
                (10, 30, 4096),
            ] {
                let n_pos = start + n_tokens;
                let mut rng = common::Rng::new((start * 7 + window + hd) as u64);
                let k = rng.vec(n_pos * kv_dim);
                let v = rng.vec(n_pos * kv_dim);
                let q: Vec<f32> = rng.vec(n_tokens * q_dim).iter().map(|x| x * 2.0).collect();
                let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
                let heads = (n_heads, n_kv, hd);
                let tokens = (start, n_tokens);
                let expected = prefill_ref((&q, q_dim), (&ks, &vs), heads, tokens, Some(window));
                let (kc, vc, qb) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd), g.buf(&q));
                for launch in &launches {
                    let (actual, _) = g.prefill(
                        launch,
                        (start, n_tokens),
                        (qb, q_dim),
                        kc,
                        vc,
                        Some(window as u64),
                    );
                    let ctx = format!(
                        "{} {kv} {n_heads}/{n_kv}x{hd}, {n_tokens} tokens from {start}, window \
                         {window}, keys per pass {:?}",
                        launch.pipeline_key(),
                        launch.keys_per_pass()
                    );
                    assert_close(&ctx, &expected, &actual, 2e-5);
                }
            }
        }
    }
}

/// Steps that share one set of partials, as a model's layers and tokens do: splits of
/// different sizes (and single chunks) in one submission, twice, each against its
/// reference, and the merge counts back at zero after each submission (a count left
/// behind would make the next step merge early, or never).
#[test]
fn decode_steps_sharing_partials_match_the_reference() {
    let g = Gpu::new();
    let (n_heads, n_kv, hd, kv) = (8usize, 2usize, 128usize, KvType::F16);
    let (n_ctx, kv_dim) = (9000usize, n_kv * hd);
    let mut rng = common::Rng::new(77);
    let (k, v) = (rng.vec(n_ctx * kv_dim), rng.vec(n_ctx * kv_dim));
    let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
    let (kc, vc) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd));
    let steps = [9000usize, 1000, 31, 5000, 2, 9000];
    let launches = g.launches(heads(n_heads, n_kv, hd, hd), kv, n_ctx as u64, 64);
    let subgroup_kernel = launches
        .iter()
        .any(|l| matches!(l.kernel(), DecodeKernel::Subgroup { .. }));
    let mut merged_here = 0;
    for launch in launches {
        let p = g.pipelines(&launch);
        let parts = g.parts(&launch);
        for round in 0..2 {
            let qs: Vec<Vec<f32>> = steps
                .iter()
                .map(|_| rng.vec(n_heads * hd).iter().map(|x| x * 2.0).collect())
                .collect();
            let outs: Vec<Slice> = steps
                .iter()
                .map(|_| g.zeros((n_heads * hd * 4) as u64))
                .collect();
            let mut ds = Vec::new();
            for ((&n, q), &out) in steps.iter().zip(&qs).zip(&outs) {
                let q = g.buf(q);
                let row = g.row_over(&launch, 0..n as u64);
                let step =
                    launch.dispatches(&p, || g.combine(), 0..n as u64, row, q, kc, vc, parts, out);
                ds.extend(step.unwrap());
            }
            g.run(ds);
            for ((&n, q), &out) in steps.iter().zip(&qs).zip(&outs) {
                let ctx = format!(
                    "{} round {round}, step over {n} ({} chunks)",
                    launch.pipeline_key(),
                    launch.split(n as u64).n_chunks
                );
                let expected = attention_ref(q, &ks, &vs, n_heads, n_kv, hd, n);
                assert_close(&ctx, &expected, &g.get(out), 2e-5);
            }
            if launch.part_bytes().counts > 0 {
                let counts = g.get(parts.counts);
                assert!(
                    counts.iter().all(|c| c.to_bits() == 0),
                    "{} round {round}: merge counts left at {:?}",
                    launch.pipeline_key(),
                    counts.iter().map(|c| c.to_bits()).collect::<Vec<_>>()
                );
            }
        }
        merged_here += (launch.merge() == Merge::LastWorkgroup) as usize;
    }
    assert_eq!(
        merged_here, subgroup_kernel as usize,
        "the last-workgroup merge was not tested"
    );
}

/// Positions appended one by one through rope_kv, then attended, as decode does; the
/// last position's q is the one attending. Odd shapes: a head size that does not divide
/// the subgroup (80), one larger than the workgroup (512) and one that is not a
/// multiple of 4 (18).
#[test]
fn rope_kv_then_attention_matches() {
    let g = Gpu::new();
    let base = 10_000.0;
    for kv in KvType::ALL {
        for (n_heads, n_kv, hd, n_pos) in [
            (9usize, 3usize, 64usize, 40usize),
            (4, 4, 32, 1),
            (8, 2, 128, 700),
            (2, 1, 80, 300),
            (2, 2, 512, 20),
            (2, 1, 18, 7),
        ] {
            let kv_dim = n_kv * hd;
            let q_dim = n_heads * hd;
            let max_pos = n_pos + 5;
            let table = g.buf(&rope_table(base, hd, max_pos));
            let h = heads(n_heads, n_kv, hd, hd);
            let mut rng = common::Rng::new((n_heads * 1000 + n_pos) as u64);
            let k_all = rng.vec(n_pos * kv_dim);
            let v_all = rng.vec(n_pos * kv_dim);
            let q: Vec<f32> = rng.vec(q_dim).iter().map(|v| v * 4.0).collect();
            // Appended once through the first launch's rope_kv (the same pipeline for
            // every launch of a format), attended by each.
            let launches = g.launches(h, kv, max_pos as u64, 512);
            let Some(append) = launches.first() else {
                continue;
            };
            let p = g.pipelines(append);
            let kc = g.zeros(append.cache_bytes());
            let vc = g.zeros(append.cache_bytes());
            let mut ds = Vec::new();
            let mut q_last = None;
            for pos in 0..n_pos {
                let step_q = if pos + 1 == n_pos {
                    q.clone()
                } else {
                    vec![0.0; q_dim]
                };
                let range = pos * kv_dim..(pos + 1) * kv_dim;
                let (all, firsts) = qkv_buffer(&step_q, &k_all[range.clone()], &v_all[range], 0);
                let qkv = g.buf(&all);
                let bias = g.zeros(all.len() as u64 * 4);
                let row = g.row_over(append, 0..pos as u64 + 1);
                let d = append.rope_kv(&p, pos as u64, row, table, (qkv, bias), firsts, kc, vc);
                ds.push(d.unwrap());
                q_last = Some(qkv);
            }
            g.run(ds);
            let q_rotated = Slice::new(q_last.unwrap().buffer, 0, (q_dim * 4) as u64);
            let k_rotated: Vec<f32> = (0..n_pos)
                .flat_map(|pos| {
                    let k = &k_all[pos * kv_dim..(pos + 1) * kv_dim];
                    rope_ref(k, n_kv, hd, hd, RopeStyle::Normal, pos, base)
                })
                .collect();
            let ctx = format!("{kv} {n_heads}/{n_kv}x{hd} over {n_pos}");
            let cached_k = g.read_cache(kv, kc, n_pos * kv_dim, hd);
            let cached_v = g.read_cache(kv, vc, n_pos * kv_dim, hd);
            let tol = cache_tolerance(kv);
            let (k_stored, v_stored) = (stored(kv, &k_rotated, hd), stored(kv, &v_all, hd));
            assert_close(&format!("{ctx}: k cache"), &k_stored, &cached_k, tol);
            match kv {
                KvType::Q8_0 => assert_close(&format!("{ctx}: v cache"), &v_stored, &cached_v, tol),
                _ => assert_eq!(cached_v, v_stored, "{ctx}: v cache"),
            }
            let q_expected = rope_ref(&q, n_heads, hd, hd, RopeStyle::Normal, n_pos - 1, base);
            // Against the values the cache holds (the kernel's own rounding of k).
            let expected =
                attention_ref(&q_expected, &cached_k, &cached_v, n_heads, n_kv, hd, n_pos);
            for launch in &launches {
                let p = g.pipelines(launch);
                let out = g.zeros((q_dim * 4) as u64);
                let parts = g.parts(launch);
                let ds = launch
                    .dispatches(
                        &p,
                        || g.combine(),
                        0..n_pos as u64,
                        g.row_over(launch, 0..n_pos as u64),
                        q_rotated,
                        kc,
                        vc,
                        parts,
                        out,
                    )
                    .unwrap();
                g.run(ds);
                let ctx = format!("{} {ctx}", launch.pipeline_key());
                assert_close(&ctx, &expected, &g.get(out), 1e-5);
            }
        }
    }
}

/// Workgroup counts: a short context is one chunk (one dispatch), a long one is spread
/// over about the target, and no chunk is shorter than the minimum.
#[test]
fn splits_follow_the_target() {
    let g = Gpu::new();
    let h = heads(32, 8, 128, 128);
    for launch in g.launches(h, KvType::F16, 1 << 16, 512) {
        assert_eq!(launch.split(1).n_chunks, 1);
        assert_eq!(launch.split(launch.min_chunk()).n_chunks, 1);
        let long = launch.split(1 << 16);
        assert_eq!(long.n_chunks, launch.max_chunks(), "{long:?}");
        let workgroups = long.n_chunks * launch.workgroups_per_chunk();
        assert!(
            (512..512 + launch.workgroups_per_chunk()).contains(&workgroups),
            "{long:?}"
        );
        for n_pos in [1u64, 2, 31, 100, 1000, 4096, 9000, 65536] {
            let s = launch.split(n_pos);
            assert!(s.chunk * s.n_chunks >= n_pos && s.chunk * (s.n_chunks - 1) < n_pos);
            assert!(s.n_chunks == 1 || s.chunk >= launch.min_chunk(), "{s:?}");
        }
    }
}

/// The prefill launch for the device under test, then one whose workgroup memory is
/// so small that it takes the fewest rows per workgroup (and the 256-value head's output
/// in slices) and whose grid is so narrow that the row blocks take several dispatches.
fn prefill_launches(g: &Gpu, h: Heads, kv: KvType) -> Vec<PrefillAttention> {
    if kv.check_head_dim(h.head_dim).is_err() {
        return Vec::new();
    }
    let profile = g.device.profile();
    let device = PrefillAttention::new(h, kv, profile).unwrap();
    let mut launches = vec![device.clone()];
    let tiny = PrefillAttention::with_budget(h, kv, 2 << 10, 3).unwrap();
    if !launches.contains(&tiny) {
        launches.push(tiny);
    }
    // Register tiles of 8 rows (the bench's option; the router takes 4).
    if let Some(eight) = device.with_tile_rows(8) {
        launches.push(eight.with_loop_limit(profile.loop_iterations).unwrap());
    }
    for l in &launches {
        l.check(profile).unwrap();
    }
    launches
}

/// The f64 reference of prefill attention: tokens `start..start + n_tokens`, token t's
/// query rows at `t * q_stride` of `q`, over the cache rows `ks`/`vs` of its positions
/// (its last `window` of them where given).
fn prefill_ref(
    (q, q_stride): (&[f32], usize),
    (ks, vs): (&[f32], &[f32]),
    (n_heads, n_kv, hd): (usize, usize, usize),
    (start, n_tokens): (usize, usize),
    window: Option<usize>,
) -> Vec<f32> {
    let kv_dim = n_kv * hd;
    (0..n_tokens)
        .flat_map(|t| {
            let pos = start + t;
            let first = window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let (kw, vw) = (&ks[first * kv_dim..], &vs[first * kv_dim..]);
            let qt = &q[t * q_stride..][..n_heads * hd];
            attention_ref(qt, kw, vw, n_heads, n_kv, hd, pos + 1 - first)
        })
        .collect()
}

/// Bytes of prefill attention's state between passes for `n_tokens` tokens.
fn prefill_state_bytes(h: Heads, n_tokens: usize) -> u64 {
    n_tokens as u64 * h.n_heads * PREFILL_STATE_BYTES
}

/// rope_kv_batch leaves q, the K cache and the V cache with the same bits as one
/// rope_kv per token (and q rotated as the f64 reference does), in each format and
/// rope mode, with and without biases: full and partial rotation, GQA, q/k/v rows
/// padded apart, at the start of the cache and after a thousand rows already written.
#[test]
fn rope_kv_batch_matches_rope_kv_token_by_token() {
    let g = Gpu::new();
    let base = 10_000.0;
    for (kv, (rope, biased)) in KvType::ALL
        .into_iter()
        .flat_map(|kv| ROPE_CASES.map(|case| (kv, case)))
    {
        // (heads, kv heads, head_dim, rope_dim, padding after each of q, k, v)
        for (n_heads, n_kv, head_dim, rope_dim, pad) in [
            (9usize, 3usize, 64usize, 64usize, 0usize),
            (7, 1, 80, 80, 6),
            (4, 2, 18, 10, 3),
            (6, 2, 96, 64, 2),
        ] {
            let h = heads_with(n_heads, n_kv, head_dim, rope_dim, rope);
            let Ok(batch) = PrefillAttention::new(h, kv, g.device.profile()) else {
                assert_eq!(kv, KvType::Q8_0, "{n_heads}/{n_kv}x{head_dim}");
                continue;
            };
            let (q_dim, kv_dim) = (n_heads * head_dim, n_kv * head_dim);
            let row_stride = q_dim + kv_dim * 2 + 3 * pad;
            let bias_values = match biased {
                true => common::Rng::new(head_dim as u64).vec(row_stride),
                false => vec![0.0; row_stride],
            };
            let bias = g.buf(&bias_values);
            let firsts = ((q_dim + pad) as u64, (q_dim + kv_dim + 2 * pad) as u64);
            let bp = batch.pipelines(&g.device, &g.cache).unwrap();
            let single = AttentionLaunch::portable(h, kv, 1300, 8).unwrap();
            let sp = g.pipelines(&single);
            for (start, n_tokens) in [(0usize, 1usize), (0, 7), (0, 64), (1000, 2), (1000, 300)] {
                let n_pos = start + n_tokens;
                let table = g.buf(&rope_table(base, rope_dim, n_pos));
                let mut rng = common::Rng::new((start * 31 + n_tokens * 7 + head_dim) as u64);
                let rows = rng.vec(n_tokens * row_stride);
                let earlier = rng.vec(start * kv_dim);
                let cache_bytes = (n_pos * n_kv) as u64 * kv.row_bytes(head_dim as u64);
                let cache = || {
                    let c = g.zeros(cache_bytes);
                    let filled = g.cache(kv, &earlier, head_dim);
                    let mut list = CommandList::new();
                    if start > 0 {
                        list.copy(filled, c.buffer, 0);
                    }
                    g.device.submit(&list).unwrap();
                    c
                };
                let (kb, vb) = (cache(), cache());
                let qkv = g.buf(&rows);
                g.run(vec![batch.rope_kv_batch(
                    &bp,
                    start as u64,
                    n_tokens as u64,
                    table,
                    (qkv, row_stride as u64),
                    bias,
                    firsts,
                    kb,
                    vb,
                )]);
                let (ks, vs) = (cache(), cache());
                let token_rows: Vec<Slice> = (0..n_tokens)
                    .map(|t| g.buf(&rows[t * row_stride..(t + 1) * row_stride]))
                    .collect();
                let ds = token_rows
                    .iter()
                    .enumerate()
                    .map(|(t, &row)| {
                        let pos = (start + t) as u64;
                        let rt = g.row_over(&single, 0..pos + 1);
                        let d = single.rope_kv(&sp, pos, rt, table, (row, bias), firsts, ks, vs);
                        d.unwrap()
                    })
                    .collect();
                g.run(ds);
                let ctx = format!(
                    "rope_kv_batch {kv} {rope:?} bias {biased} {n_heads}/{n_kv}x{head_dim}/\
                     {rope_dim} pad {pad}, {n_tokens} tokens from {start}"
                );
                let batch_rows = g.get(qkv);
                for (t, &row) in token_rows.iter().enumerate() {
                    let one = g.get(row);
                    let of_batch = &batch_rows[t * row_stride..(t + 1) * row_stride];
                    assert_eq!(bits(of_batch), bits(&one), "{ctx}: token {t}'s q, k, v");
                    let q: Vec<f32> = rows[t * row_stride..][..q_dim]
                        .iter()
                        .zip(&bias_values)
                        .map(|(x, b)| x + b)
                        .collect();
                    let pos = start + t;
                    let expected = rope_ref(&q, n_heads, head_dim, rope_dim, rope, pos, base);
                    assert_close(
                        &format!("{ctx}: token {t}'s q"),
                        &expected,
                        &one[..q_dim],
                        1e-6,
                    );
                }
                let raw = |s: Slice| g.device.read(s.buffer, 0, cache_bytes).unwrap();
                assert!(raw(kb) == raw(ks), "{ctx}: K cache differs");
                assert!(raw(vb) == raw(vs), "{ctx}: V cache differs");
                // Rows before start kept, the new rows written (random values, so
                // none is zero in a plain format, and none of a q8_0 block's largest).
                let values = g.read_cache(kv, kb, n_pos * kv_dim, head_dim);
                let stored = stored(kv, &earlier, head_dim);
                assert_eq!(
                    &values[..start * kv_dim],
                    &stored[..],
                    "{ctx}: earlier rows"
                );
                let unit = if kv == KvType::Q8_0 { 32 } else { 1 };
                assert!(
                    values[start * kv_dim..]
                        .chunks(unit)
                        .all(|b| b.iter().any(|&v| v != 0.0)),
                    "{ctx}: new rows"
                );
            }
        }
    }
}

/// Causal prefill attention against the f64 reference of each token over the cache
/// rows up to its own: 1, 2, 7, 64 and 300 tokens at the start of the cache and after a
/// thousand rows; head sizes 64, 80, 128, 256 and 36 (18 pairs, not a multiple of 4); GQA ratios 1, 4 and 7; q rows spaced
/// as in the model's qkv buffer; both formats; the device's launch, and on the smaller
/// cases one with sliced heads and several dispatches.
#[test]
fn prefill_attention_matches_the_reference() {
    let g = Gpu::new();
    let mut cases = 0;
    for kv in KvType::ALL {
        for (n_heads, n_kv, hd, token_counts) in [
            (4usize, 4usize, 64usize, &[1usize, 2, 7, 64, 300][..]),
            (8, 2, 128, &[1, 7, 64][..]),
            (7, 1, 256, &[2, 7][..]),
            (14, 2, 80, &[7, 64][..]),
            // 18 pairs: a chunk's last pair quad is part past the head.
            (6, 2, 36, &[7, 40][..]),
        ] {
            let h = heads(n_heads, n_kv, hd, hd);
            let launches = prefill_launches(&g, h, kv);
            let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
            let q_stride = q_dim + 2 * kv_dim;
            for &n_tokens in token_counts {
                for start in [0usize, 1000] {
                    let n_pos = start + n_tokens;
                    let mut rng = common::Rng::new((n_heads * 7919 + n_pos * 31 + hd) as u64);
                    let k = rng.vec(n_pos * kv_dim);
                    let v = rng.vec(n_pos * kv_dim);
                    let q: Vec<f32> = rng
                        .vec(n_tokens * q_stride)
                        .iter()
                        .map(|x| x * 2.0)
                        .collect();
                    let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
                    let (heads, tokens) = ((n_heads, n_kv, hd), (start, n_tokens));
                    let expected = prefill_ref((&q, q_stride), (&ks, &vs), heads, tokens, None);
                    let exact = prefill_ref((&q, q_stride), (&k, &v), heads, tokens, None);
                    let (kc, vc, qb) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd), g.buf(&q));
                    // The sliced launch of the fewest rows per workgroup, and the one of 8-row
                    // register tiles, are slow on a CPU: they take the smaller cases.
                    let small = n_tokens * n_pos <= 4096;
                    for launch in launches.iter().take(if small { 3 } else { 1 }) {
                        let (actual, n_dispatches) =
                            g.prefill(launch, (start, n_tokens), (qb, q_stride), kc, vc, None);
                        let ctx = format!(
                            "{} {kv} {n_heads}/{n_kv}x{hd}, {n_tokens} tokens from {start} \
                             ({n_dispatches} dispatches, {} slices)",
                            launch.pipeline_key(),
                            launch.n_slices()
                        );
                        assert_close(&ctx, &expected, &actual, 2e-5);
                        let bound = exact_bound(kv);
                        let err = max_error(&exact, &actual);
                        assert!(err <= bound, "{ctx}: {err} from exact math");
                        cases += 1;
                    }
                }
            }
        }
    }
    assert!(cases >= 2 * 2 * 12, "{cases} cases");
}

/// q, k and v of a prefill case: random values, q doubled, k times 1 + `growth` x its
/// position (so that each token's scores grow with its keys).
fn growing_case(
    (n_heads, n_kv, hd): (usize, usize, usize),
    q_stride: usize,
    (start, n_tokens): (usize, usize),
    growth: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let n_pos = start + n_tokens;
    let kv_dim = n_kv * hd;
    let mut rng = common::Rng::new((n_heads * 7919 + n_pos * 31 + hd) as u64);
    let k: Vec<f32> = rng
        .vec(n_pos * kv_dim)
        .iter()
        .enumerate()
        .map(|(i, x)| x * (1.0 + growth * (i / kv_dim) as f32))
        .collect();
    let v = rng.vec(n_pos * kv_dim);
    let q = rng
        .vec(n_tokens * q_stride)
        .iter()
        .map(|x| x * 2.0)
        .collect();
    (q, k, v)
}

/// Prefill attention on the matrix units (`attention/flash.wgsl`) against the f64
/// reference: head sizes 64, 80 (not a multiple of 16), 128 and 256; GQA ratios 1, 4 and
/// 7; 1 to 300 tokens from the start of the cache and after a thousand rows; a local
/// layer's window; each cache format. The last case makes each token's scores grow
/// with its keys' positions, so that rows' maxima pass their reference by more than
/// the kernel lets P grow and the accumulators are rescaled. The operands meet in f16
/// (q scaled, K, P and V), so the bound is f16's: a few 2^-11 of each term. Lavapipe has
/// no matrix units: there the test says so and checks nothing; it runs on the H200.
#[test]
fn prefill_attention_on_matrix_units_matches_the_reference() {
    let g = Gpu::new();
    let profile = g.device.profile();
    let mut cases = 0;
    let mut worst = 0f32;
    for kv in KvType::ALL {
        for (n_heads, n_kv, hd, token_counts, window, growth) in [
            (
                4usize,
                4usize,
                64usize,
                &[1usize, 2, 7, 64, 300][..],
                None,
                0.0f32,
            ),
            (32, 8, 128, &[1, 17, 300][..], None, 0.0),
            (8, 2, 128, &[64][..], Some(24u64), 0.0),
            (7, 1, 256, &[2, 33][..], None, 0.0),
            (14, 2, 80, &[7, 64][..], None, 0.0),
            (8, 2, 128, &[300][..], None, 0.05),
        ] {
            let h = heads(n_heads, n_kv, hd, hd);
            if kv.check_head_dim(h.head_dim).is_err() {
                continue;
            }
            let keys = 1000 + token_counts.iter().max().copied().unwrap_or(0) as u64;
            let launch = match PrefillAttention::on_matrix_units(h, kv, profile, keys).unwrap() {
                Ok(l) => l,
                Err(why) => {
                    eprintln!(
                        "{}: no prefill attention on matrix units: {why}",
                        profile.name
                    );
                    return;
                }
            };
            launch.check(profile).unwrap();
            let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
            let q_stride = q_dim + 2 * kv_dim;
            for &n_tokens in token_counts {
                for start in [0usize, 1000] {
                    let n_pos = start + n_tokens;
                    let heads = (n_heads, n_kv, hd);
                    let (q, k, v) = growing_case(heads, q_stride, (start, n_tokens), growth);
                    let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
                    let window_ref = window.map(|w| w as usize);
                    let expected = prefill_ref(
                        (&q, q_stride),
                        (&ks, &vs),
                        heads,
                        (start, n_tokens),
                        window_ref,
                    );
                    let (kc, vc, qb) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd), g.buf(&q));
                    eprintln!("{kv} {n_heads}/{n_kv}x{hd}, {n_tokens} tokens from {start}");
                    let (actual, _) =
                        g.prefill(&launch, (start, n_tokens), (qb, q_stride), kc, vc, window);
                    // f16 operands: scores off by about 2^-11 of |q| |k|, weights by as much
                    // relative, the output by that much of the values it averages.
                    let score_scale = if growth > 0.0 {
                        1.0 + growth * n_pos as f32
                    } else {
                        1.0
                    };
                    let tol = 4e-3 * score_scale.max(1.0);
                    let err = max_error(&expected, &actual);
                    worst = worst.max(err / score_scale);
                    let ctx = format!(
                        "{} {kv} {n_heads}/{n_kv}x{hd}, {n_tokens} tokens from {start}, window \
                         {window:?}, growth {growth}",
                        launch.pipeline_key()
                    );
                    assert!(
                        actual.iter().all(|x| x.is_finite()),
                        "{ctx}: a row not written"
                    );
                    assert!(err <= tol, "{ctx}: {err} from the reference (bound {tol})");
                    cases += 1;
                }
            }
        }
    }
    assert!(cases >= 3 * 20, "{cases} cases");
    eprintln!("{cases} cases; largest error {worst} (per unit of score scale)");
}

/// `attention/flash.wgsl` with its cooperative matrices emulated on subgroups
/// (`coop_emulation`), against the f64 reference, on any adapter with subgroups of 4 to
/// 16 lanes (lavapipe at 4, 8 and 16): 8 x 8 matrices (Metal's size) at 4 and 8
/// lanes, 16 x 16 at 16. Everything in the kernel runs but the matrix instructions
/// themselves: the tiles, the causal and window masks, the GQA rows, the online softmax
/// and its rescales (the last case's scores grow with their keys' positions, over
/// enough key tiles that workgroups rescale twice and then walk the keys ahead for each
/// row's max), head sizes that are not whole matrices, the three cache formats,
/// operands staged as f32 (8 x 8, at 8 lanes, from the f16 cache) and (where the
/// adapter has f16) as f16.
/// The emulation is written out without loops, so the kernel's own loops are all that
/// lavapipe's loop limit counts. Each case runs twice, created without wgpu's index
/// clamps (the route's `IndexChecks::Kernel`) and with them: the same bits, or an index
/// left its array.
///
/// One test per cache format, so that lavapipe compiles their pipelines on two threads
/// (the whole at 8 lanes was 4.5 to 6 minutes on one).
fn emulated_flash_matches_the_reference(kv: KvType) {
    use brass::device::{Access, CoopInput, CoopMatrix};
    use brass::kernels::PipelineTemplate;
    const STORAGE: &[Access] = &[
        Access::Read,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
        Access::ReadWrite,
    ];
    let g = Gpu::new();
    let profile = g.device.profile();
    let lanes = profile.subgroup_max;
    if !profile.subgroups || profile.subgroup_min != lanes || !(4..=16).contains(&lanes) {
        eprintln!(
            "{}: no emulation for subgroups of {}..{lanes}",
            profile.name, profile.subgroup_min
        );
        return;
    }
    let size = lanes.max(8);
    // f32 operands on 8 x 8 matrices (Metal's f32 simdgroup matrices) at 8 lanes (or
    // where there is no f16), f16 on both sizes. Staging f32 or f16 shares every index
    // and every lane's share of the work, so f32 needs no second subgroup size; 16 x 16
    // f32 is what only an adapter with such matrices and no shader f16 would take
    // (`CoopMatrix::pick`), one brass has not met. Each left out costs minutes of CI on
    // lavapipe.
    let mut inputs = Vec::new();
    if size == 8 && (lanes == 8 || !profile.f16) {
        inputs.push(CoopInput::F32);
    }
    if profile.f16 {
        inputs.push(CoopInput::F16);
    }
    let budget = profile.workgroup_storage_bytes;
    let mut cases = 0;
    // The largest error per unit of score scale of f32 and of f16 operands, where run.
    let mut worst = [None::<f32>; 2];
    // Staging f32 or f16 operands differs only in the staged type, and the cache
    // formats' reads are the same code for either: the last operand type takes every
    // format, the other the f16 cache alone (with the others, 8 of the 23 pipelines
    // lavapipe compiles at 8 lanes).
    let every_format = *inputs.last().expect("f32 or f16 operands");
    for &input in inputs
        .iter()
        .filter(|&&input| input == every_format || kv == KvType::F16)
    {
        let shape = CoopMatrix {
            size,
            input,
            vector_loads: true,
        };
        // A cache format's reads are the same code whatever the lanes; the lanes change
        // how a tile's work divides among them, which the f16 cache's cases cover. So
        // away from 8 lanes the other formats take the first case only (each case costs
        // lavapipe seconds to compile).
        let cases_here = if lanes == 8 || kv == KvType::F16 {
            usize::MAX
        } else {
            1
        };
        for (n_heads, n_kv, hd, token_counts, window, growth) in [
            (4usize, 4usize, 64usize, &[1usize, 7, 40][..], None, 0.0f32),
            (8, 2, 64, &[24][..], Some(9u64), 0.0),
            (7, 1, 32, &[3, 20][..], None, 0.0),
            (6, 2, 40, &[9][..], None, 0.0),
            (8, 2, 128, &[130][..], None, 0.0),
            (4, 1, 64, &[100][..], None, 0.4),
        ]
        .into_iter()
        .take(cases_here)
        {
            let h = heads(n_heads, n_kv, hd, hd);
            if kv.check_head_dim(h.head_dim).is_err() {
                continue;
            }
            let launch = match PrefillAttention::matrix_with_budget(
                h,
                kv,
                (shape, lanes, lanes),
                budget,
                profile.max_workgroups_per_dim,
            ) {
                Ok(launch) => launch,
                // 16 x 16 f32 tiles of a 128-value head need more than lavapipe's 32 KiB.
                Err(why @ NoMatrixAttention::TileTooBig { .. }) => {
                    eprintln!("{shape} {kv} {n_heads}/{n_kv}x{hd}: not emulated here: {why}");
                    continue;
                }
                Err(why) => panic!("{shape} {kv} {n_heads}/{n_kv}x{hd}: {why}"),
            };
            let source = coop_emulation::emulate(&launch.source().unwrap(), size, lanes);
            let key = format!("{} emulated on {lanes} lanes", launch.pipeline_key());
            // The route's (the kernel's own index checks), and one with wgpu's clamps,
            // which must give the same bits: an index past its array would differ.
            let [pipelines, clamped] = [IndexChecks::Kernel, IndexChecks::Wgpu].map(|checks| {
                let id = g
                    .cache
                    .get_or_create(&g.device, &format!("{key} {checks:?}"), || {
                        Ok((
                            source.clone(),
                            PipelineTemplate {
                                params_bytes: 48,
                                storage: STORAGE,
                                fallback_reason: None,
                                index_checks: checks,
                            },
                        ))
                    })
                    .unwrap();
                // Only the attention dispatches run here.
                PrefillPipelines {
                    rope_kv_batch: id,
                    prefill: id,
                }
            });
            let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
            let q_stride = q_dim + 2 * kv_dim;
            for &n_tokens in token_counts {
                for start in [0usize, 5] {
                    let n_pos = start + n_tokens;
                    let heads = (n_heads, n_kv, hd);
                    let (q, k, v) = growing_case(heads, q_stride, (start, n_tokens), growth);
                    let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
                    let expected = prefill_ref(
                        (&q, q_stride),
                        (&ks, &vs),
                        heads,
                        (start, n_tokens),
                        window.map(|w| w as usize),
                    );
                    let [actual, with_clamps] = [&pipelines, &clamped].map(|p| {
                        let out = g.buf(&vec![f32::NAN; n_tokens * q_dim]);
                        let ds = launch
                            .dispatches(
                                p,
                                start as u64,
                                n_tokens as u64,
                                (g.buf(&q), q_stride as u64),
                                g.cache(kv, &k, hd),
                                g.cache(kv, &v, hd),
                                (out, q_dim as u64),
                                g.zeros(prefill_state_bytes(h, n_tokens)),
                                window,
                            )
                            .unwrap();
                        g.run(ds);
                        g.get(out)
                    });
                    let ctx = format!(
                        "{key} {kv} {n_heads}/{n_kv}x{hd}, {n_tokens} tokens from {start}, \
                         window {window:?}, growth {growth}"
                    );
                    assert_eq!(
                        bits(&actual),
                        bits(&with_clamps),
                        "{ctx}: clamps changed it"
                    );
                    // f32 operands: the kernel's arithmetic alone. f16 operands (the
                    // H200's): scores off by about 2^-11 of |q| |k|, weights by as much
                    // relative, the output by that much of the values it averages.
                    let err = max_error(&expected, &actual);
                    let score_scale = 1.0 + growth * n_pos as f32;
                    let (slot, tol) = match input {
                        CoopInput::F32 => (0, 1e-4 * score_scale),
                        CoopInput::F16 => (1, 4e-3 * score_scale),
                    };
                    worst[slot] = Some(worst[slot].unwrap_or(0.0).max(err / score_scale));
                    assert!(err <= tol, "{ctx}: {err} from the reference (bound {tol})");
                    cases += 1;
                }
            }
        }
    }
    // Away from 8 lanes: the f16 cache's 18, the other formats' first case's 6.
    let least = if kv == KvType::F16 { 18 } else { 6 };
    assert!(cases >= least, "{kv}: {cases} cases");
    eprintln!(
        "{kv}: {cases} cases on {lanes} lanes; largest error per unit of score scale: \
         f32 operands {:?}, f16 {:?} (None: not run here)",
        worst[0], worst[1]
    );
}

#[test]
fn prefill_attention_with_emulated_matrices_matches_the_reference_f16_cache() {
    emulated_flash_matches_the_reference(KvType::F16);
}

#[test]
fn prefill_attention_with_emulated_matrices_matches_the_reference_f32_cache() {
    emulated_flash_matches_the_reference(KvType::F32);
}

#[test]
fn prefill_attention_with_emulated_matrices_matches_the_reference_q8_0_cache() {
    emulated_flash_matches_the_reference(KvType::Q8_0);
}

/// Prefill attention over more keys than one invocation may walk where the device cuts
/// its loops short (lavapipe: 65,535 iterations, all loops together; issue 45), and
/// around the boundaries of the passes that split them: 32 tokens from position 6,000
/// (past where every head shape here went wrong in one pass) and across the first two
/// pass boundaries, each format, against the f64 reference. The device's own launch,
/// and one whose passes are short, so that every device runs several.
#[test]
fn prefill_attention_in_key_passes_matches_the_reference() {
    let g = Gpu::new();
    let profile = g.device.profile();
    let mut passes_seen = 0;
    for kv in KvType::ALL {
        for (n_heads, n_kv, hd) in [(4usize, 1usize, 128usize), (7, 1, 256), (8, 2, 64)] {
            let h = heads(n_heads, n_kv, hd, hd);
            let own = PrefillAttention::new(h, kv, profile).unwrap();
            let short = own.clone().with_loop_limit(Some(16_384)).unwrap();
            let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
            let n_tokens = 32;
            for launch in [own, short] {
                let mut starts = vec![6000usize];
                if let Some(keys) = launch.keys_per_pass() {
                    let keys = keys as usize;
                    starts.extend([keys - n_tokens / 2, 2 * keys - n_tokens / 4]);
                }
                for start in starts {
                    let n_pos = start + n_tokens;
                    let mut rng = common::Rng::new((start * 13 + hd) as u64);
                    let k = rng.vec(n_pos * kv_dim);
                    let v = rng.vec(n_pos * kv_dim);
                    let q: Vec<f32> = rng.vec(n_tokens * q_dim).iter().map(|x| x * 2.0).collect();
                    let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
                    let heads = (n_heads, n_kv, hd);
                    let expected =
                        prefill_ref((&q, q_dim), (&ks, &vs), heads, (start, n_tokens), None);
                    let (kc, vc) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd));
                    let (actual, n_dispatches) =
                        g.prefill(&launch, (start, n_tokens), (g.buf(&q), q_dim), kc, vc, None);
                    passes_seen = passes_seen.max(n_dispatches);
                    let ctx = format!(
                        "{} {kv} {n_heads}/{n_kv}x{hd}, {n_tokens} tokens from {start}, keys \
                         per pass {:?} ({n_dispatches} dispatches)",
                        launch.pipeline_key(),
                        launch.keys_per_pass()
                    );
                    assert_close(&ctx, &expected, &actual, 2e-5);
                }
            }
        }
    }
    assert!(passes_seen > 2, "no case took several passes");
    if let Some(limit) = profile.loop_iterations {
        eprintln!("the device stops an invocation's loops after {limit} iterations");
    }
}

/// Decode attention over 20,000 positions with one chunk asked for: where the device
/// cuts an invocation's loops short, the chunks stay short enough (both kernels, each
/// format), and the output matches the reference.
#[test]
fn decode_attention_chunks_stay_within_the_loop_limit() {
    let g = Gpu::new();
    let profile = g.device.profile();
    let n_pos = 20_000usize;
    for kv in KvType::ALL {
        for (n_heads, n_kv, hd) in [(8usize, 2usize, 128usize), (7, 1, 256)] {
            let h = heads(n_heads, n_kv, hd, hd);
            let routed = route_attention(
                profile,
                &AttentionQuery {
                    heads: h,
                    kv,
                    n_ctx: n_pos as u64,
                },
                &Overrides {
                    attention_workgroups: Some(1),
                    ..Overrides::default()
                },
            )
            .unwrap()
            .launch()
            .clone();
            let portable = AttentionLaunch::portable(h, kv, n_pos as u64, 1)
                .unwrap()
                .with_loop_limit(profile.loop_iterations)
                .unwrap();
            let kv_dim = n_kv * hd;
            let mut rng = common::Rng::new((n_heads * 31 + hd) as u64);
            let k = rng.vec(n_pos * kv_dim);
            let v = rng.vec(n_pos * kv_dim);
            let q: Vec<f32> = rng.vec(n_heads * hd).iter().map(|x| x * 2.0).collect();
            let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
            let expected = attention_ref(&q, &ks, &vs, n_heads, n_kv, hd, n_pos);
            let (kc, vc) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd));
            for launch in [routed, portable] {
                let split = launch.split(n_pos as u64);
                assert_eq!(
                    launch.max_chunk().is_some(),
                    profile.loop_iterations.is_some()
                );
                if let Some(most) = launch.max_chunk() {
                    assert!(split.chunk <= most, "{split:?} past {most}");
                }
                let actual = g.decode(&launch, &q, kc, vc, n_pos);
                let ctx = format!(
                    "{} {kv} {n_heads}/{n_kv}x{hd} over {n_pos} ({split:?}, at most {:?})",
                    launch.pipeline_key(),
                    launch.max_chunk()
                );
                assert_close(&ctx, &expected, &actual, 2e-5);
            }
        }
    }
}

/// The sizing is a pure function of the heads and the budget: it stays within the
/// budget, slices a head only when one row of it does not fit, and refuses a budget too
/// small for any tile rather than overrunning it.
#[test]
fn prefill_sizing_fits_its_budget() {
    for hd in [2u64, 18, 64, 80, 128, 256, 512, 2048] {
        for budget in [3u64 << 10, 16 << 10, 32 << 10, 48 << 10] {
            let h = heads(7, 1, hd as usize, hd as usize);
            let l = PrefillAttention::with_budget(h, KvType::F16, budget, 65535).unwrap();
            assert!(l.workgroup_bytes() <= budget, "{hd} in {budget}: {l:?}");
            if l.n_slices() > 1 {
                assert_eq!(l.rows(), 8, "{hd} in {budget}: {l:?}");
            }
        }
    }
    let h = heads(4, 4, 64, 64);
    assert!(PrefillAttention::with_budget(h, KvType::F32, 256, 65535).is_err());
    assert!(
        PrefillAttention::with_budget(heads(4, 3, 64, 64), KvType::F32, 16 << 10, 65535).is_err()
    );
}

/// Linear RoPE scaling (Gemma 3 4B's global layers: factor 8): the table at position
/// 8q is the unscaled table's at q, and a scale of 1 is the unscaled table.
#[test]
fn rope_table_scaled_rotates_by_the_scaled_position() {
    let (base, dim) = (1e6, 128);
    let plain = rope_table(base, dim, 64);
    assert_eq!(rope_table_scaled(base, dim, 64, 1.0, None), plain);
    let scaled = rope_table_scaled(base, dim, 512, 0.125, None);
    for q in 0..64 {
        assert_close(
            &format!("position {}", 8 * q),
            &row_of(&plain, dim, q),
            &row_of(&scaled, dim, 8 * q),
            1e-6,
        );
    }
    assert_ne!(row_of(&scaled, dim, 9), row_of(&plain, dim, 9));
    // Llama 3.x's frequency factors: a factor of 8 on a pair is that pair at 1/8 of
    // the position, 1 leaves it as it was.
    let factors: Vec<f32> = (0..dim / 2)
        .map(|i| if i % 2 == 0 { 8.0 } else { 1.0 })
        .collect();
    let by_factor = rope_table_scaled(base, dim, 512, 1.0, Some(&factors));
    let unscaled = rope_table(base, dim, 512);
    for p in (0..512).step_by(8) {
        for i in 0..dim / 2 {
            let (got, want) = match i % 2 {
                0 => (
                    &by_factor[p * dim + 2 * i..][..2],
                    &plain[p / 8 * dim + 2 * i..][..2],
                ),
                _ => (
                    &by_factor[p * dim + 2 * i..][..2],
                    &unscaled[p * dim + 2 * i..][..2],
                ),
            };
            assert_close(&format!("position {p} pair {i}"), want, got, 1e-6);
        }
    }
}

fn row_of(t: &[f32], dim: usize, p: usize) -> Vec<f32> {
    t[p * dim..(p + 1) * dim].to_vec()
}

/// The subgroup kernel spreads a team's four head slots over its quarters, so a team is
/// at least four lanes: every preset routes teams of 4 to its smallest subgroup, and a
/// device whose subgroups can be narrower gets the portable kernel and is told why.
#[test]
fn subgroup_teams_are_at_least_a_lane_per_head_slot() {
    for preset in PRESETS {
        let profile = DeviceProfile::preset(preset).unwrap();
        for (n_heads, n_kv, hd) in [
            (4usize, 4usize, 64usize),
            (32, 8, 128),
            (7, 1, 256),
            (2, 1, 32),
        ] {
            for kv in KvType::ALL {
                let query = AttentionQuery {
                    heads: heads(n_heads, n_kv, hd, hd),
                    kv,
                    n_ctx: 4096,
                };
                let Ok(route) = route_attention(&profile, &query, &Overrides::default()) else {
                    continue;
                };
                if let DecodeKernel::Subgroup { team, .. } = route.launch().kernel() {
                    assert!(
                        (4..=profile.subgroup_sizes_run().0).contains(&team),
                        "{preset} {kv} {hd}: team of {team}"
                    );
                }
                let narrow = DeviceProfile {
                    subgroup_min: 2,
                    subgroup_runs: None,
                    ..profile.clone()
                };
                let route = route_attention(&narrow, &query, &Overrides::default()).unwrap();
                assert!(
                    matches!(route.launch().kernel(), DecodeKernel::Portable { .. }),
                    "{preset} {kv} {hd} on subgroups of 2"
                );
                let why: Vec<String> = route.clauses().iter().map(|c| c.to_string()).collect();
                assert!(
                    why.iter().any(|c| c.contains("subgroups of 2 lanes")),
                    "{why:?}"
                );
            }
        }
    }
}

/// Metal reports subgroups of 4..64 for every device, and Apple GPUs run 32 lanes: the
/// m4-max preset's decode attention has teams sized for 32 lanes (a row's words, up to
/// 32), not for the 4 the reported range would allow, and its clause says why. Without
/// that fact the same preset gets the narrow teams it had before.
#[test]
fn m4_max_attention_teams_are_sized_for_the_32_lanes_apple_gpus_run() {
    let m4 = DeviceProfile::preset("m4-max").unwrap();
    assert_eq!(m4.subgroup_runs, Some(32));
    let team_of = |profile: &DeviceProfile, h: Heads, kv: KvType| {
        let query = AttentionQuery {
            heads: h,
            kv,
            n_ctx: 8192,
        };
        let route = route_attention(profile, &query, &Overrides::default()).unwrap();
        route.launch().check(profile).unwrap();
        let why: Vec<String> = route.clauses().iter().map(|c| c.to_string()).collect();
        match route.launch().kernel() {
            DecodeKernel::Subgroup { team, lane_words } => (team, lane_words, why.join("; ")),
            other => panic!("{other:?}: {why:?}"),
        }
    };
    // SmolLM2's heads of 64 in f16 are 8 words a row; Llama-3-8B's of 128 are 16 in
    // f16 and 32 in f32.
    for (h, kv, team) in [
        (heads(9, 3, 64, 64), KvType::F16, 8),
        (heads(32, 8, 128, 128), KvType::F16, 16),
        (heads(32, 8, 128, 128), KvType::F32, 32),
    ] {
        let (got, lane_words, why) = team_of(&m4, h, kv);
        assert_eq!((got, lane_words), (team, 1), "{kv} {}: {why}", h.head_dim);
        assert!(
            why.contains("subgroups run 32 lanes (reported 4..64)"),
            "{why}"
        );
        let reported_only = DeviceProfile {
            subgroup_runs: None,
            ..m4.clone()
        };
        let (got, _, why) = team_of(&reported_only, h, kv);
        assert_eq!(got, 4, "{why}");
        assert!(why.contains("subgroups 4..64:"), "{why}");
    }
    // A live Metal adapter on Apple silicon gets the fact; an Intel Mac's GPU does not.
    use brass::device::Backend;
    assert_eq!(
        DeviceProfile::apple_simd_width(Backend::Metal, "Apple M1"),
        Some(32)
    );
    assert_eq!(
        DeviceProfile::apple_simd_width(Backend::Metal, "AMD Radeon Pro 5500M"),
        None
    );
    assert_eq!(
        DeviceProfile::apple_simd_width(Backend::Vulkan, "Apple M2"),
        None
    );
}

/// A q8_0 cache holds whole blocks of 32 values: heads that are not are refused by
/// every launch, with the reason, and the route says nothing else.
#[test]
fn q8_0_cache_refuses_heads_that_are_not_whole_blocks() {
    let g = Gpu::new();
    let h = heads(14, 2, 80, 80);
    let routed = route_attention(
        g.device.profile(),
        &AttentionQuery {
            heads: h,
            kv: KvType::Q8_0,
            n_ctx: 100,
        },
        &Overrides::default(),
    );
    let err = routed.unwrap_err().to_string();
    assert!(err.contains("q8_0") && err.contains("80"), "{err}");
    assert!(AttentionLaunch::portable(h, KvType::Q8_0, 100, 8).is_err());
    assert!(PrefillAttention::new(h, KvType::Q8_0, g.device.profile()).is_err());
    for hd in [32usize, 64, 96, 128, 256] {
        let h = heads(4, 2, hd, hd);
        assert!(PrefillAttention::new(h, KvType::Q8_0, g.device.profile()).is_ok());
    }
}

/// The host's encoding of each format reads back as the values `stored_row` says the
/// cache holds, and q8_0 keeps each value within half a step of its block's scale.
#[test]
fn kv_formats_round_trip() {
    let mut rng = common::Rng::new(5);
    for hd in [32usize, 64, 128, 256] {
        let values: Vec<f32> = rng.vec(7 * hd).iter().map(|v| v * 3.0).collect();
        for kv in KvType::ALL {
            let bytes = kv.encode(&values, hd);
            assert_eq!(bytes.len() as u64, 7 * kv.row_bytes(hd as u64), "{kv} {hd}");
            let back = kv.decode(&bytes, hd, 7);
            assert_eq!(back, stored(kv, &values, hd), "{kv} {hd}");
        }
        let q8 = stored(KvType::Q8_0, &values, hd);
        for (block, stored) in values.chunks(32).zip(q8.chunks(32)) {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (x, s) in block.iter().zip(stored) {
                assert!((x - s).abs() <= amax / 254.0 * 1.0001, "{x} stored as {s}");
            }
        }
    }
}

/// The step compositions the row tests run: (position, window) per row, 1, 2 and 5 rows.
/// Between them: position 0, window-clipped rows (a window shorter than the position),
/// a row long enough for several chunks, and rows in another order than alone.
const ROW_STEPS: [&[(usize, Option<u64>)]; 3] = [
    &[(2999, None)],
    &[(0, None), (1500, Some(1000))],
    &[
        (700, Some(100)),
        (2999, None),
        (1500, Some(1000)),
        (0, None),
        (31, None),
    ],
];
/// Positions each sequence's cache region holds in the row tests.
const ROW_REGION: usize = 3000;

/// rope_kv over several rows in one dispatch: each row's q, and its k and v rows at its
/// own region of the cache, bit-identical to that row run alone (the same pipeline, one
/// row) and within a rotation's rounding of the f64 reference; no other cache row
/// written. Each format, both rope modes, with and without biases, rows padded apart.
#[test]
fn rope_kv_rows_match_each_row_alone() {
    let g = Gpu::new();
    let base = 10_000.0;
    let (n_heads, n_kv, hd, pad) = (8usize, 2usize, 64usize, 4usize);
    let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
    let row_stride = q_dim + 2 * kv_dim + 3 * pad;
    let firsts = ((q_dim + pad) as u64, (q_dim + kv_dim + 2 * pad) as u64);
    let table = g.buf(&rope_table(base, hd, ROW_REGION));
    for (kv, (rope, biased)) in KvType::ALL
        .into_iter()
        .flat_map(|kv| ROPE_CASES.map(|case| (kv, case)))
    {
        let h = heads_with(n_heads, n_kv, hd, hd, rope);
        let launch = AttentionLaunch::portable(h, kv, ROW_REGION as u64, 8).unwrap();
        let p = g.pipelines(&launch);
        let mut rng = common::Rng::new(hd as u64 + biased as u64);
        let bias_values = match biased {
            true => rng.vec(row_stride),
            false => vec![0.0; row_stride],
        };
        let bias = g.buf(&bias_values);
        for step in ROW_STEPS {
            let n = step.len();
            let region_bytes = ROW_REGION as u64 * launch.position_bytes();
            let all_regions = n as u64 * region_bytes;
            let values = rng.vec(n * row_stride);
            let rows: Vec<AttentionRow> = step
                .iter()
                .enumerate()
                .map(|(r, &(pos, w))| launch.row(pos as u64, (r * ROW_REGION) as u64, w).unwrap())
                .collect();
            // `rows` appended from `values` into fresh caches: the qkv rows and caches.
            let append = |rows: &[AttentionRow], values: &[f32]| {
                let qkv = g.buf(values);
                let (kc, vc) = (g.zeros(all_regions), g.zeros(all_regions));
                let d = launch.rope_kv_rows(
                    &p,
                    rows,
                    g.rows(rows),
                    table,
                    ((qkv, row_stride as u64), bias),
                    firsts,
                    kc,
                    vc,
                );
                g.run(vec![d.unwrap()]);
                (g.get(qkv), kc, vc)
            };
            let (out, kc, vc) = append(&rows, &values);
            let cache_values = |c: Slice| g.read_cache(kv, c, n * ROW_REGION * kv_dim, hd);
            let (k_all, v_all) = (cache_values(kc), cache_values(vc));
            for (r, (&(pos, _), row)) in step.iter().zip(&rows).enumerate() {
                let ctx = format!("{kv} {rope:?} bias {biased}, row {r} of {n} at {pos}");
                // The row alone: its own qkv row, the one-row table, the same cache rows.
                let (alone, ka, va) =
                    append(&[*row], &values[r * row_stride..(r + 1) * row_stride]);
                let of_rows = &out[r * row_stride..(r + 1) * row_stride];
                assert_eq!(bits(of_rows), bits(&alone), "{ctx}: q, k, v");
                let at = (r * ROW_REGION + pos) * kv_dim..(r * ROW_REGION + pos + 1) * kv_dim;
                let (ka, va) = (cache_values(ka), cache_values(va));
                assert_eq!(
                    bits(&k_all[at.clone()]),
                    bits(&ka[at.clone()]),
                    "{ctx}: k row"
                );
                assert_eq!(
                    bits(&v_all[at.clone()]),
                    bits(&va[at.clone()]),
                    "{ctx}: v row"
                );
                // Against the reference.
                let plus = |from: usize, len: usize| -> Vec<f32> {
                    (from..from + len)
                        .map(|i| values[r * row_stride + i] + bias_values[i])
                        .collect()
                };
                let q = plus(0, q_dim);
                let k = plus(firsts.0 as usize, kv_dim);
                let v = plus(firsts.1 as usize, kv_dim);
                let expected_q = rope_ref(&q, n_heads, hd, hd, rope, pos, base);
                assert_close(&format!("{ctx}: q"), &expected_q, &of_rows[..q_dim], 1e-6);
                let expected_k = stored(kv, &rope_ref(&k, n_kv, hd, hd, rope, pos, base), hd);
                let tol = cache_tolerance(kv);
                assert_close(&format!("{ctx}: k"), &expected_k, &k_all[at.clone()], tol);
                assert_close(&format!("{ctx}: v"), &stored(kv, &v, hd), &v_all[at], tol);
            }
            let written = |c: &[f32]| c.iter().filter(|&&x| x != 0.0).count();
            assert!(
                written(&k_all) <= n * kv_dim && written(&v_all) <= n * kv_dim,
                "{kv} {rope:?}: rows other than the step's written"
            );
        }
    }
}

/// Decode attention of a step's rows, each over its own sequence's region of one cache
/// at its own position (ROW_STEPS: 1, 2 and 5 rows), in one dispatch (and one combine
/// pass): each row's output bit-identical to that row run alone through the one-row
/// path, and within the single-step tolerance of the f64 reference over the row's
/// positions. Every format; both kernels, the subgroup one with both merges, a launch
/// `extra` (None: the routed ones) adds; the merge counts back at zero after each step.
fn decode_rows_case(
    g: &Gpu,
    kv: KvType,
    extra: Option<&dyn Fn(AttentionLaunch) -> AttentionLaunch>,
) {
    let (n_heads, n_kv, hd) = (8usize, 2usize, 128usize);
    let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
    // Rows padded apart, as a model's qkv rows are (the kernels read in groups of 4).
    let (q_stride, out_stride) = (q_dim + 2 * kv_dim + 8, q_dim + 4);
    let n_most = ROW_STEPS.iter().map(|s| s.len()).max().unwrap();
    let mut rng = common::Rng::new(kv as u64 + 3);
    let k = rng.vec(n_most * ROW_REGION * kv_dim);
    let v = rng.vec(n_most * ROW_REGION * kv_dim);
    let (ks, vs) = (stored(kv, &k, hd), stored(kv, &v, hd));
    let (kc, vc) = (g.cache(kv, &k, hd), g.cache(kv, &v, hd));
    let mut launches = g.launches(heads(n_heads, n_kv, hd, hd), kv, ROW_REGION as u64, 64);
    if let Some(f) = extra {
        launches = launches.into_iter().map(f).collect();
    }
    let mut tried = Vec::new();
    for launch in &launches {
        let p = g.pipelines(launch);
        let parts = {
            let bytes = launch.part_bytes_rows(n_most as u64);
            Partials {
                ml: g.zeros(bytes.ml),
                acc: g.zeros(bytes.acc),
                counts: g.zeros(bytes.counts),
            }
        };
        let run = |rows: &[AttentionRow], q: &[f32]| -> Vec<f32> {
            let out = g.zeros((rows.len() * out_stride * 4) as u64);
            let ds = launch
                .dispatches_rows(
                    &p,
                    || g.combine(),
                    rows,
                    g.rows(rows),
                    (g.buf(q), q_stride as u64),
                    kc,
                    vc,
                    parts,
                    (out, out_stride as u64),
                )
                .unwrap();
            g.run(ds);
            if parts.counts.size > 4 {
                let counts = g.get(parts.counts);
                assert!(counts.iter().all(|c| c.to_bits() == 0), "merge counts left");
            }
            g.get(out)
        };
        for step in ROW_STEPS {
            let n = step.len();
            let q: Vec<f32> = rng.vec(n * q_stride).iter().map(|x| x * 2.0).collect();
            let rows: Vec<AttentionRow> = step
                .iter()
                .enumerate()
                .map(|(r, &(pos, w))| launch.row(pos as u64, (r * ROW_REGION) as u64, w).unwrap())
                .collect();
            let out = run(&rows, &q);
            let most = rows.iter().map(|r| r.n_chunks).max().unwrap();
            tried.push((launch.pipeline_key(), launch.merge(), n, most));
            for (r, row) in rows.iter().enumerate() {
                let ctx = format!(
                    "{} {kv}: row {r} of {n}, {row:?} (max chunk {:?})",
                    launch.pipeline_key(),
                    launch.max_chunk()
                );
                if let Some(most) = launch.max_chunk() {
                    assert!(row.chunk as u64 <= most, "{ctx}: chunk past {most}");
                }
                let q_row = &q[r * q_stride..(r + 1) * q_stride];
                let got = &out[r * out_stride..][..q_dim];
                assert!(
                    out[r * out_stride + q_dim..(r + 1) * out_stride]
                        .iter()
                        .all(|&x| x == 0.0),
                    "{ctx}: padding written"
                );
                let alone = run(&[*row], q_row);
                assert_eq!(
                    bits(got),
                    bits(&alone[..q_dim]),
                    "{ctx}: not its bits alone"
                );
                let (first, last) = (
                    row.cache_first as usize + row.window_first as usize,
                    row.cache_first as usize + row.pos as usize,
                );
                let span = first * kv_dim..(last + 1) * kv_dim;
                let expected = attention_ref(
                    &q_row[..q_dim],
                    &ks[span.clone()],
                    &vs[span],
                    n_heads,
                    n_kv,
                    hd,
                    last + 1 - first,
                );
                assert_close(&ctx, &expected, got, 2e-5);
            }
        }
    }
    eprintln!("{kv}: (launch, merge, rows, most chunks) {tried:?}");
    assert!(
        tried.iter().all(|t| t.2 > 1 || t.3 > 1),
        "a step of one chunk only"
    );
    assert!(tried.iter().any(|t| t.1 == Merge::CombinePass));
}

/// `decode_rows_case` for the f32 cache.
#[test]
fn decode_rows_match_each_row_alone_f32() {
    decode_rows_case(&Gpu::new(), KvType::F32, None);
}

/// `decode_rows_case` for the f16 cache.
#[test]
fn decode_rows_match_each_row_alone_f16() {
    decode_rows_case(&Gpu::new(), KvType::F16, None);
}

/// `decode_rows_case` for the q8_0 cache.
#[test]
fn decode_rows_match_each_row_alone_q8_0() {
    decode_rows_case(&Gpu::new(), KvType::Q8_0, None);
}

/// `decode_rows_case` under a loop limit so tight that chunks are short: each row's
/// split still keeps its chunks within the limit, and more chunks than the target
/// gives (the largest row's chunk count sets the grid).
#[test]
fn decode_rows_stay_within_the_loop_limit() {
    let limit: &dyn Fn(AttentionLaunch) -> AttentionLaunch =
        &|l: AttentionLaunch| l.with_loop_limit(Some(9_000)).unwrap();
    let g = Gpu::new();
    for kv in KvType::ALL {
        decode_rows_case(&g, kv, Some(limit));
    }
}

/// A row whose split is not the one its own positions take is refused (its bits would
/// depend on who built it), as is a row past its cache or its table.
#[test]
fn decode_rows_refuse_a_split_not_their_own() {
    let g = Gpu::new();
    let h = heads(8, 2, 128, 128);
    let launch = &g.launches(h, KvType::F16, 4096, 64)[0];
    let p = g.pipelines(launch);
    let kc = g.zeros(2 * launch.cache_bytes());
    let parts = g.parts(launch);
    let q_dim = 8 * 128;
    let q = g.zeros(2 * q_dim * 4);
    let out = g.zeros(2 * q_dim * 4);
    let good = launch.row(3000, 4096, None).unwrap();
    let try_rows = |rows: &[AttentionRow], table: Slice, parts: Partials| {
        launch.dispatches_rows(
            &p,
            || g.combine(),
            rows,
            table,
            (q, q_dim),
            kc,
            kc,
            parts,
            (out, q_dim),
        )
    };
    let two_parts = {
        let bytes = launch.part_bytes_rows(2);
        Partials {
            ml: g.zeros(bytes.ml),
            acc: g.zeros(bytes.acc),
            counts: g.zeros(bytes.counts),
        }
    };
    assert!(try_rows(&[good], g.rows(&[good]), parts).is_ok());
    let other_split = AttentionRow {
        chunk: good.chunk * 2,
        n_chunks: good.n_chunks.div_ceil(2),
        ..good
    };
    let err = try_rows(&[other_split], g.rows(&[other_split]), parts).unwrap_err();
    assert!(
        err.to_string().contains("not the row its position takes"),
        "{err}"
    );
    let past = launch.row(100, 2 * 4096 - 50, None).unwrap();
    assert!(try_rows(&[past], g.rows(&[past]), parts).is_err());
    assert!(try_rows(&[good, good], g.rows(&[good]), two_parts).is_err());
    // Partials for one row do not hold two.
    assert!(try_rows(&[good, good], g.rows(&[good, good]), parts).is_err());
    assert!(try_rows(&[good, good], g.rows(&[good, good]), two_parts).is_ok());
    assert!(launch.row(4096, 0, None).is_err());
}

/// Every sequence's region of a layer's cache is in one binding: past the device's
/// limit that is a checked error giving the numbers, so a caller can fall back.
#[test]
fn cache_binding_limit_is_a_checked_error() {
    let g = Gpu::new();
    let profile = g.device.profile();
    let launch = &g.launches(heads(32, 8, 128, 128), KvType::F16, 8192, 512)[0];
    let binding = profile.usable_binding_bytes();
    let fit = binding / launch.position_bytes();
    assert!(launch.check_cache_binding(profile, fit).is_ok());
    let err = launch
        .check_cache_binding(profile, fit + 1)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&binding.to_string()) && err.contains(&fit.to_string()),
        "{err}"
    );
}
