//! Picking the next token from the logits.
//!
//! With `temperature == 0` the pick is greedy: the highest logit after the repetition
//! penalty, the lowest id on ties (the GPU argmax's rule). Otherwise the steps follow
//! llama.cpp's default sampler chain, in its order: repetition penalty → top-k → top-p →
//! min-p → temperature → a seeded draw from the softmax of what is left. top-p and min-p
//! therefore see the distribution before temperature, as in llama.cpp.

mod rng;

use rng::SplitMix64;

use crate::{Error, Result};

/// How to sample. Each filter has an "off" value, noted per field; values outside a
/// field's range are refused by [`SamplerConfig::validate`] (which
/// [`Session::generate`](crate::model::Session::generate) calls), never silently read as
/// "off".
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Divides the logits before the draw: finite and at least 0, where `0` means
    /// greedy.
    pub temperature: f32,
    /// Keep only the `top_k` highest logits. `0` is off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`,
    /// in `0..=1`. `1.0` is off.
    pub top_p: f32,
    /// Keep tokens at least `min_p` times as likely as the most likely one, in `0..=1`.
    /// `0.0` is off.
    pub min_p: f32,
    /// Tokens seen in the last `repeat_last_n` of the history get their logit divided
    /// by this when positive and multiplied by it when negative (llama.cpp's
    /// `penalty_repeat`): finite and above 0. `1.0` is off.
    pub repetition_penalty: f32,
    /// How much of the history the penalty looks at. `0` is off.
    pub repeat_last_n: usize,
    /// The draw's seed: the same seed, logits and history give the same tokens.
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no
    /// repetition penalty over the last 64 tokens), with seed 0.
    fn default() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Always the highest logit.
    pub fn greedy() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        }
    }

    /// Whether every draw is the highest logit (temperature 0, no repetition penalty in
    /// effect), so the GPU's argmax alone decides it.
    pub fn is_greedy(&self) -> bool {
        (self.temperature.is_nan() || self.temperature <= 0.0)
            && (self.repetition_penalty == 1.0 || self.repeat_last_n == 0)
    }

    /// Refuses a setting outside its range with [`Error::Setting`] naming it: a negative
    /// or NaN temperature, `top_p` or `min_p` outside `0..=1`, a repetition penalty that
    /// is not a finite number above 0. [`Sampler::sample`] reads any value without
    /// panicking, but what such values would mean is a guess (a negative temperature is
    /// greedy there, a `top_p` of 2 is off), so they are refused where a caller can be
    /// told.
    pub fn validate(&self) -> Result<()> {
        let refuse = |setting: &'static str, value: f32, expected: &str| {
            Err(Error::Setting {
                setting,
                value: value.to_string(),
                expected: expected.to_string(),
            })
        };
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return refuse(
                "SamplerConfig::temperature",
                self.temperature,
                "must be a finite number of at least 0 (0 is greedy)",
            );
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return refuse(
                "SamplerConfig::top_p",
                self.top_p,
                "must be within 0..=1, a probability (1 is off)",
            );
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return refuse(
                "SamplerConfig::min_p",
                self.min_p,
                "must be within 0..=1, a share of the likeliest token's probability (0 is off)",
            );
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return refuse(
                "SamplerConfig::repetition_penalty",
                self.repetition_penalty,
                "must be a finite number above 0 (1 is off; above 1 penalizes repeats)",
            );
        }
        Ok(())
    }
}

/// A candidate token: its id and its (possibly modified) logit.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u32,
    logit: f32,
}

/// Highest logit first, then lowest id.
fn by_rank(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Holds the configuration, the random state, and a buffer reused across calls.
///
/// # Examples
///
/// ```
/// use brass::sampling::{Sampler, SamplerConfig};
///
/// let logits = [0.5, 2.0, 1.5, -1.0];
///
/// // Greedy: the highest logit.
/// let mut greedy = Sampler::new(SamplerConfig::greedy());
/// assert_eq!(greedy.sample(&logits, &[]), 1);
///
/// // Seeded draws: the same seed, logits and history give the same tokens.
/// let config = SamplerConfig {
///     temperature: 0.7,
///     top_p: 0.9,
///     seed: 42,
///     ..SamplerConfig::default()
/// };
/// config.validate()?;
/// let (mut a, mut b) = (Sampler::new(config.clone()), Sampler::new(config));
/// for _ in 0..8 {
///     assert_eq!(a.sample(&logits, &[]), b.sample(&logits, &[]));
/// }
///
/// // A setting out of range is refused, named as the API names it.
/// let wide = SamplerConfig { top_p: 1.5, ..SamplerConfig::default() };
/// assert!(matches!(
///     wide.validate(),
///     Err(brass::Error::Setting { setting: "SamplerConfig::top_p", .. })
/// ));
/// # Ok::<(), brass::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Sampler {
    config: SamplerConfig,
    rng: SplitMix64,
    candidates: Vec<Candidate>,
}

impl Sampler {
    /// A sampler with `config`, its random state seeded by `config.seed`. The config is
    /// not checked here: [`SamplerConfig::validate`] does that (and
    /// [`Session::generate`](crate::model::Session::generate) calls it).
    pub fn new(config: SamplerConfig) -> Sampler {
        let rng = SplitMix64::new(config.seed);
        Sampler {
            config,
            rng,
            candidates: Vec::new(),
        }
    }

    /// The settings it samples with.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Picks the next token from `logits` (one per vocabulary id), given the tokens so
    /// far (`history`, oldest first; ids outside `logits` are ignored). NaN logits count
    /// as −∞. Returns 0 for empty logits; never panics.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        if logits.is_empty() {
            return 0;
        }
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.clear();
        candidates.extend(logits.iter().enumerate().map(|(id, &logit)| Candidate {
            id: id as u32,
            logit: if logit.is_nan() {
                f32::NEG_INFINITY
            } else {
                logit
            },
        }));
        self.penalize(&mut candidates, history);

        let config = &self.config;
        let pick = if config.temperature.is_nan() || config.temperature <= 0.0 {
            greedy(&candidates)
        } else {
            let mut sorted = false;
            if config.top_k > 0 && config.top_k < candidates.len() {
                top_k(&mut candidates, config.top_k);
                sorted = true;
            }
            if config.top_p < 1.0 {
                top_p(&mut candidates, config.top_p, sorted);
            }
            if config.min_p > 0.0 {
                min_p(&mut candidates, config.min_p);
            }
            for c in candidates.iter_mut() {
                c.logit /= config.temperature;
            }
            draw(&candidates, self.rng.next_f64())
        };
        self.candidates = candidates;
        pick
    }

    /// llama.cpp's repetition penalty: once per distinct token in the window, however
    /// often it occurs.
    fn penalize(&self, candidates: &mut [Candidate], history: &[u32]) {
        let penalty = self.config.repetition_penalty;
        let n = self.config.repeat_last_n.min(history.len());
        if n == 0 || penalty == 1.0 || !(penalty > 0.0 && penalty.is_finite()) {
            return;
        }
        let mut window = history[history.len() - n..].to_vec();
        window.sort_unstable();
        window.dedup();
        // The candidates are still in id order here.
        for id in window {
            if let Some(c) = candidates.get_mut(id as usize) {
                c.logit = if c.logit <= 0.0 {
                    c.logit * penalty
                } else {
                    c.logit / penalty
                };
            }
        }
    }
}

/// The first highest logit, i.e. the lowest id among ties.
fn greedy(candidates: &[Candidate]) -> u32 {
    let mut best = candidates[0];
    for &c in &candidates[1..] {
        if c.logit > best.logit {
            best = c;
        }
    }
    best.id
}

/// Keeps the `k` best, sorted best first.
fn top_k(candidates: &mut Vec<Candidate>, k: usize) {
    candidates.select_nth_unstable_by(k - 1, by_rank);
    candidates.truncate(k);
    candidates.sort_unstable_by(by_rank);
}

/// Keeps the smallest best-first prefix whose probability reaches `p` (at least one
/// token). Leaves the candidates sorted.
fn top_p(candidates: &mut Vec<Candidate>, p: f32, sorted: bool) {
    let max = candidates
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let total: f64 = candidates
        .iter()
        .map(|c| f64::from((c.logit - max).exp()))
        .sum();
    if !(total > 0.0 && total.is_finite()) {
        return;
    }
    // The answer is nearly always among the few best, so sort only a prefix first
    // (as llama.cpp does) and fall back to a full sort if it falls short.
    let mut prefix = if sorted {
        candidates.len()
    } else {
        candidates.len().min(256)
    };
    loop {
        if !sorted {
            if prefix < candidates.len() {
                candidates.select_nth_unstable_by(prefix - 1, by_rank);
            }
            candidates[..prefix].sort_unstable_by(by_rank);
        }
        let mut cumulative = 0.0f64;
        for i in 0..prefix {
            cumulative += f64::from((candidates[i].logit - max).exp()) / total;
            if cumulative >= f64::from(p) {
                candidates.truncate(i + 1);
                return;
            }
        }
        if prefix == candidates.len() {
            return;
        }
        prefix = candidates.len();
    }
}

/// Keeps tokens whose probability is at least `p` times the best one's, i.e. whose logit
/// is at least `max + ln p`. If that would leave nothing, leaves everything (llama.cpp).
fn min_p(candidates: &mut Vec<Candidate>, p: f32) {
    let max = candidates
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let threshold = max + p.ln();
    if candidates.iter().any(|c| c.logit >= threshold) {
        candidates.retain(|c| c.logit >= threshold);
    }
}

/// Draws from the softmax of the logits with `u` uniform in [0, 1).
fn draw(candidates: &[Candidate], u: f64) -> u32 {
    let max = candidates
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let weights = || {
        candidates
            .iter()
            .map(move |c| f64::from((c.logit - max).exp()))
    };
    let total: f64 = weights().sum();
    if !(total > 0.0 && total.is_finite()) {
        // Every logit is −∞ (or +∞): no distribution to draw from.
        return greedy(candidates);
    }
    let target = u * total;
    let mut cumulative = 0.0;
    for (c, w) in candidates.iter().zip(weights()) {
        cumulative += w;
        if cumulative > target {
            return c.id;
        }
    }
    // Rounding left the target past the sum: the last token with any weight.
    candidates
        .iter()
        .zip(weights())
        .rev()
        .find(|(_, w)| *w > 0.0)
        .map_or(candidates[0].id, |(c, _)| c.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(logits: &[f32]) -> Vec<Candidate> {
        logits
            .iter()
            .enumerate()
            .map(|(i, &l)| Candidate {
                id: i as u32,
                logit: l,
            })
            .collect()
    }

    fn ids(c: &[Candidate]) -> Vec<u32> {
        c.iter().map(|c| c.id).collect()
    }

    #[test]
    fn top_k_keeps_the_best_sorted_with_ties_by_id() {
        let mut c = cands(&[1.0, 3.0, 2.0, 3.0, 0.0]);
        top_k(&mut c, 3);
        assert_eq!(ids(&c), [1, 3, 2]);
    }

    #[test]
    fn top_p_keeps_the_smallest_prefix_reaching_p() {
        // Probabilities 0.5, 0.25, 0.125, 0.125.
        let l = |p: f32| p.ln();
        let logits = [l(0.125), l(0.5), l(0.125), l(0.25)];
        let mut c = cands(&logits);
        top_p(&mut c, 0.7, false);
        assert_eq!(ids(&c), [1, 3]);
        let mut c = cands(&logits);
        top_p(&mut c, 0.8, false);
        assert_eq!(ids(&c), [1, 3, 0]);
        let mut c = cands(&logits);
        top_p(&mut c, 0.0, false);
        assert_eq!(ids(&c), [1]);
    }

    #[test]
    fn top_p_falls_back_past_the_sorted_prefix() {
        // 1000 equal tokens: reaching p = 0.9 needs 900, more than the first 256.
        let mut c = cands(&[0.0; 1000]);
        top_p(&mut c, 0.9, false);
        assert_eq!(c.len(), 900);
        assert_eq!(c[0].id, 0);
    }

    #[test]
    fn settings_out_of_range_are_refused_by_name() {
        let refused = |config: SamplerConfig, setting: &str, value: &str| {
            let err = config.validate().unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(&err, Error::Setting { setting: s, value: v, .. } if *s == setting && v == value),
                "{msg}"
            );
            msg
        };
        let with = |f: fn(&mut SamplerConfig)| {
            let mut c = SamplerConfig::default();
            f(&mut c);
            c
        };
        let msg = refused(with(|c| c.top_p = 2.0), "SamplerConfig::top_p", "2");
        assert!(msg.contains("0..=1"), "{msg}");
        refused(with(|c| c.top_p = -0.5), "SamplerConfig::top_p", "-0.5");
        refused(with(|c| c.top_p = f32::NAN), "SamplerConfig::top_p", "NaN");
        let msg = refused(with(|c| c.min_p = 5.0), "SamplerConfig::min_p", "5");
        assert!(msg.contains("0..=1"), "{msg}");
        refused(
            with(|c| c.temperature = -1.0),
            "SamplerConfig::temperature",
            "-1",
        );
        refused(
            with(|c| c.temperature = f32::NAN),
            "SamplerConfig::temperature",
            "NaN",
        );
        refused(
            with(|c| c.temperature = f32::INFINITY),
            "SamplerConfig::temperature",
            "inf",
        );
        refused(
            with(|c| c.repetition_penalty = 0.0),
            "SamplerConfig::repetition_penalty",
            "0",
        );
        refused(
            with(|c| c.repetition_penalty = -1.0),
            "SamplerConfig::repetition_penalty",
            "-1",
        );
        // Each range's edges are accepted: greedy, top-p and min-p off and at their
        // strictest, a penalty below 1 (which favours repeats).
        for ok in [
            SamplerConfig::greedy(),
            SamplerConfig::default(),
            with(|c| (c.top_p, c.min_p) = (0.0, 1.0)),
            with(|c| (c.top_p, c.min_p) = (1.0, 0.0)),
            with(|c| c.repetition_penalty = 0.5),
        ] {
            ok.validate().unwrap();
        }
    }

    #[test]
    fn draw_edges() {
        let c = cands(&[0.0, 0.0]);
        assert_eq!(draw(&c, 0.0), 0);
        assert_eq!(draw(&c, 0.4999), 0);
        assert_eq!(draw(&c, 0.5), 1);
        assert_eq!(draw(&c, 0.999_999), 1);
        assert_eq!(draw(&cands(&[f32::NEG_INFINITY; 3]), 0.5), 0);
    }
}
