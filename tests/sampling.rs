//! Sampler behaviour: greedy is argmax, each filter does what it says, the penalty
//! follows llama.cpp, seeds reproduce, and draws follow the softmax.

use brass::sampling::{Sampler, SamplerConfig};

/// Deterministic pseudo-random logits in [-8, 8).
fn logits(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 16.0 - 8.0
        })
        .collect()
}

/// The first index of the maximum.
fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Sampling only, no filters: temperature `t`, top-k / top-p / min-p off.
fn plain(temperature: f32, seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repetition_penalty: 1.0,
        repeat_last_n: 0,
        seed,
    }
}

#[test]
fn greedy_is_argmax_with_ties_to_the_lowest_id() {
    let mut sampler = Sampler::new(SamplerConfig::greedy());
    for seed in 0..50 {
        let l = logits(seed, 1000);
        assert_eq!(sampler.sample(&l, &[]), argmax(&l));
    }
    assert_eq!(sampler.sample(&[1.0, 5.0, 5.0, 2.0], &[]), 1);
    assert_eq!(sampler.sample(&[7.0, 7.0], &[]), 0);
}

#[test]
fn top_k_one_is_greedy_at_any_temperature() {
    for &temperature in &[0.1, 1.0, 5.0, 100.0] {
        let config = SamplerConfig {
            top_k: 1,
            ..plain(temperature, 7)
        };
        let mut sampler = Sampler::new(config);
        for seed in 0..40 {
            let l = logits(seed, 500);
            assert_eq!(
                sampler.sample(&l, &[]),
                argmax(&l),
                "temperature {temperature}"
            );
        }
    }
}

#[test]
fn tiny_top_p_is_greedy() {
    let mut sampler = Sampler::new(SamplerConfig {
        top_p: 1e-6,
        ..plain(3.0, 11)
    });
    for seed in 0..40 {
        let l = logits(seed, 2000);
        assert_eq!(sampler.sample(&l, &[]), argmax(&l));
    }
}

#[test]
fn min_p_drops_unlikely_tokens() {
    // Probabilities 0.4, 0.3, 0.15, 0.1, 0.05: min_p 0.5 keeps p >= 0.2, i.e. ids 0 and 1.
    let l: Vec<f32> = [0.4f32, 0.3, 0.15, 0.1, 0.05]
        .iter()
        .map(|p| p.ln())
        .collect();
    let mut sampler = Sampler::new(SamplerConfig {
        min_p: 0.5,
        ..plain(1.0, 3)
    });
    let mut seen = [0usize; 5];
    for _ in 0..2000 {
        seen[sampler.sample(&l, &[]) as usize] += 1;
    }
    assert_eq!(&seen[2..], [0, 0, 0], "{seen:?}");
    assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
    // Without min_p every token shows up.
    let mut sampler = Sampler::new(plain(1.0, 3));
    let mut seen = [0usize; 5];
    for _ in 0..2000 {
        seen[sampler.sample(&l, &[]) as usize] += 1;
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

#[test]
fn repetition_penalty_changes_the_pick() {
    let penalized = |penalty, last_n| SamplerConfig {
        repetition_penalty: penalty,
        repeat_last_n: last_n,
        ..SamplerConfig::greedy()
    };

    // Positive logits are divided: 2.0 / 1.2 = 1.67 < 1.9.
    let l = [2.0, 1.9, 1.8];
    assert_eq!(Sampler::new(penalized(1.2, 64)).sample(&l, &[]), 0);
    assert_eq!(Sampler::new(penalized(1.2, 64)).sample(&l, &[0]), 1);
    // Once per distinct token: 0 three times is still one division.
    assert_eq!(
        Sampler::new(penalized(1.2, 64)).sample(&[2.0, 1.5], &[0, 0, 0]),
        0
    );
    // Negative logits are multiplied: -1.0 * 1.5 = -1.5 < -1.1.
    assert_eq!(
        Sampler::new(penalized(1.5, 64)).sample(&[-1.0, -1.1], &[0]),
        1
    );
    // Only the last `repeat_last_n` tokens count.
    assert_eq!(Sampler::new(penalized(1.2, 2)).sample(&l, &[0, 2, 2]), 0);
    assert_eq!(Sampler::new(penalized(1.2, 3)).sample(&l, &[0, 2, 2]), 1);
    // Off: penalty 1, window 0, or ids outside the vocabulary.
    assert_eq!(Sampler::new(penalized(1.0, 64)).sample(&l, &[0]), 0);
    assert_eq!(Sampler::new(penalized(1.2, 0)).sample(&l, &[0]), 0);
    assert_eq!(Sampler::new(penalized(1.2, 64)).sample(&l, &[99]), 0);
}

#[test]
fn same_seed_same_tokens() {
    let run = |seed| {
        let mut sampler = Sampler::new(SamplerConfig {
            seed,
            ..SamplerConfig::default()
        });
        let mut history = Vec::new();
        for step in 0..200 {
            // Flat-ish logits so the draw, not the filters, decides.
            let l: Vec<f32> = logits(step, 300).iter().map(|x| x * 0.2).collect();
            let token = sampler.sample(&l, &history);
            history.push(token);
        }
        history
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

/// Draws `n` times and checks the counts against softmax(logits / temperature) with
/// Pearson's chi-square. The seed is fixed, so this is deterministic; the bound is the
/// 0.1 % critical value, so a correct sampler passes for almost any seed.
fn assert_follows_softmax(logits: &[f32], temperature: f32) {
    let n = 50_000;
    let mut sampler = Sampler::new(plain(temperature, 2024));
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..n {
        counts[sampler.sample(logits, &[]) as usize] += 1;
    }
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| (f64::from(l) / f64::from(temperature)).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let chi2: f64 = counts
        .iter()
        .zip(&weights)
        .map(|(&observed, w)| {
            let expected = n as f64 * w / total;
            (observed as f64 - expected).powi(2) / expected
        })
        .sum();
    // Critical values at p = 0.001 for 4 degrees of freedom.
    assert_eq!(logits.len(), 5);
    assert!(chi2 < 18.47, "chi-square {chi2:.2}, counts {counts:?}");
}

#[test]
fn draws_follow_the_softmax() {
    let l = [0.0, 1.0, 2.0, -1.0, 0.5];
    assert_follows_softmax(&l, 1.0);
    // Temperature flattens the distribution as softmax(l / t).
    assert_follows_softmax(&l, 2.0);
}

#[test]
fn odd_input_does_not_panic() {
    let mut sampler = Sampler::new(SamplerConfig::default());
    assert_eq!(sampler.sample(&[], &[]), 0);
    assert_eq!(
        sampler.sample(&[f32::NAN, 1.0, f32::NAN], &[5, u32::MAX]),
        1
    );
    assert_eq!(sampler.sample(&[f32::NEG_INFINITY; 4], &[]), 0);
    let mut greedy = Sampler::new(SamplerConfig::greedy());
    assert_eq!(greedy.sample(&[f32::NAN, f32::NAN], &[]), 0);
    assert_eq!(greedy.sample(&[0.0, f32::INFINITY], &[]), 1);
    let mut sampler = Sampler::new(SamplerConfig {
        top_k: 100,
        top_p: 0.0,
        min_p: 2.0,
        ..SamplerConfig::default()
    });
    assert_eq!(sampler.sample(&[0.5, 3.0, 1.0], &[]), 1);
}
