//! The engine's thread: requests join as sequences while there is room, every running
//! one advances a token per step, and each request hears its text as it comes.
//!
//! The GPU work is synchronous and long (a step is milliseconds to seconds), so it runs
//! on a thread of its own, never on the async runtime. Requests reach it through a
//! bounded queue (full: the server answers 503) and hear back through a channel each;
//! a request whose receiver is gone (its client disconnected) leaves the engine before
//! the next step.
//!
//! A finished request's sequence stays in the engine, its cache held, until a later
//! request needs its region: a prompt that begins as a held or running one did takes
//! the rows the engine says it can (`Engine::reusable`: bit for bit those it would
//! compute, so the reply is the one it gets from scratch), as llama.cpp's
//! `cache_prompt` does, and its usage counts them as `cached_tokens`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use brass::model::{Engine, Event, SequenceId, SequenceOptions, StopReason};
use brass::sampling::SamplerConfig;
use brass::tokenizer::{TokenStreamDecoder, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use crate::openai::{Finish, Usage};

/// A request, tokenized and checked, waiting for a sequence.
pub struct Job {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub stops: Vec<String>,
    /// Whether the end-of-generation token ends the reply (the request's `ignore_eos`
    /// turns it off).
    pub stop_at_eog: bool,
    pub updates: UnboundedSender<Update>,
}

/// What a request hears.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A generated token's text: empty where the token completes no character yet, or
    /// may begin a stop string (held back until it is clear). A stream sends a chunk per
    /// token, so a client sees each step, its first token included.
    Token(String),
    /// The text held back at the reply's end.
    Tail(String),
    /// The reply is complete.
    Done { finish: Finish, usage: Usage },
    /// The engine failed it (the message says how); nothing more comes.
    Failed(String),
}

/// How many requests wait and run, for `/health`.
#[derive(Debug, Default)]
pub struct Load {
    pub queued: AtomicUsize,
    pub running: AtomicUsize,
    pub served: AtomicUsize,
    /// Finished requests' sequences held for their caches.
    pub held: AtomicUsize,
}

/// A running request.
struct Active<'t> {
    updates: UnboundedSender<Update>,
    decoder: TokenStreamDecoder<'t>,
    stops: StopMatcher,
    usage: Usage,
}

impl Active<'_> {
    fn send(&self, update: Update) {
        // A request gone meanwhile is noticed before the next step.
        let _ = self.updates.send(update);
    }

    /// Sends the text still held back and the end.
    fn finish(&mut self, finish: Finish) {
        let tail = self.decoder.finish();
        let (mut text, stopped) = self.stops.push(&tail);
        if !stopped {
            text.push_str(&self.stops.flush());
        }
        if !text.is_empty() {
            self.send(Update::Tail(text));
        }
        let finish = if stopped { Finish::Stop } else { finish };
        self.send(Update::Done {
            finish,
            usage: self.usage,
        });
    }
}

/// Runs the engine until the queue's every sender is gone; with `prompt_cache`,
/// finished requests' caches are held for later prompts.
pub fn run(
    mut engine: Engine,
    tokenizer: Arc<Tokenizer>,
    jobs: Receiver<Job>,
    load: Arc<Load>,
    prompt_cache: bool,
) {
    let capacity = engine.model().sequences();
    let mut active: HashMap<SequenceId, Active<'_>> = HashMap::new();
    let mut held = Held {
        order: Vec::new(),
        on: prompt_cache,
    };
    loop {
        // Join while there is room; wait for work only when there is none.
        while active.len() < capacity {
            let job = match active.is_empty() {
                true => match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                },
                false => match jobs.try_recv() {
                    Ok(job) => job,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => break,
                },
            };
            load.queued.fetch_sub(1, Ordering::Relaxed);
            if job.updates.is_closed() {
                continue;
            }
            let options = SequenceOptions {
                max_tokens: job.max_tokens,
                sampler: job.sampler,
                stop_at_eog: job.stop_at_eog,
                ..SequenceOptions::default()
            };
            match held.start(&mut engine, &job.prompt, options) {
                Ok((seq, cached_tokens)) => {
                    active.insert(
                        seq,
                        Active {
                            updates: job.updates,
                            decoder: tokenizer.stream_decoder(true),
                            stops: StopMatcher::new(job.stops),
                            usage: Usage {
                                prompt_tokens: job.prompt.len(),
                                completion_tokens: 0,
                                cached_tokens,
                            },
                        },
                    );
                }
                Err(e) => {
                    let _ = job.updates.send(Update::Failed(e.to_string()));
                }
            }
        }
        // A client that left frees its sequence now.
        let gone: Vec<SequenceId> = active
            .iter()
            .filter(|(_, a)| a.updates.is_closed())
            .map(|(&seq, _)| seq)
            .collect();
        for seq in gone {
            leave(&mut engine, &mut active, seq, &load);
            eprintln!("{seq}: the client left; its sequence is freed");
        }
        load.running.store(active.len(), Ordering::Relaxed);
        load.held.store(held.order.len(), Ordering::Relaxed);
        if active.is_empty() {
            continue;
        }
        let events = match engine.step() {
            Ok(events) => events,
            Err(e) => {
                // The step's state is unknown: every running request ends with the error.
                eprintln!("error: a step failed: {e}");
                held.drop_all(&mut engine);
                let running: Vec<SequenceId> = active.keys().copied().collect();
                for seq in running {
                    if let Some(a) = leave(&mut engine, &mut active, seq, &load) {
                        a.send(Update::Failed(format!("the engine's step failed: {e}")));
                    }
                }
                continue;
            }
        };
        for event in events {
            match event {
                Event::Token { seq, id, .. } => {
                    let Some(a) = active.get_mut(&seq) else {
                        continue;
                    };
                    a.usage.completion_tokens += 1;
                    let piece = match a.decoder.push(id) {
                        Ok(piece) => piece,
                        Err(e) => {
                            if let Some(a) = leave(&mut engine, &mut active, seq, &load) {
                                a.send(Update::Failed(e.to_string()));
                            }
                            continue;
                        }
                    };
                    let (text, stopped) = a.stops.push(&piece);
                    a.send(Update::Token(text));
                    if stopped {
                        if let Some(a) = leave(&mut engine, &mut active, seq, &load) {
                            load.served.fetch_add(1, Ordering::Relaxed);
                            a.send(Update::Done {
                                finish: Finish::Stop,
                                usage: a.usage,
                            });
                        }
                    }
                }
                Event::Done { seq, reason } => {
                    // Its cache is whole: held for a later prompt, but where its logits
                    // were not finite.
                    let finite = !matches!(reason, StopReason::NonFinite(_));
                    let left = match finite && held.on {
                        true => held.keep(&mut active, seq, &load),
                        false => leave(&mut engine, &mut active, seq, &load),
                    };
                    let Some(mut a) = left else {
                        continue;
                    };
                    load.served.fetch_add(1, Ordering::Relaxed);
                    match reason {
                        StopReason::Stop(_) => a.finish(Finish::Stop),
                        // Requests are sized to their context, so this is max_tokens too.
                        StopReason::MaxTokens | StopReason::ContextFull => a.finish(Finish::Length),
                        StopReason::NonFinite(what) => a.send(Update::Failed(format!(
                            "the model's logits are not finite ({what})"
                        ))),
                    }
                }
            }
        }
    }
}

/// Finished requests' sequences, least recently used first, where the prompt cache is
/// on (`on`).
struct Held {
    order: Vec<SequenceId>,
    on: bool,
}

impl Held {
    /// A sequence for a request's prompt, and the prompt rows it took from another's
    /// cache: where the cache is on, from the held or running sequence that gives the
    /// most (a held one's region taken over in place, a running one's rows copied; a
    /// held one first where they give as many); else a new one. The least recently
    /// used held sequence is given up where the engine has no free region.
    fn start(
        &mut self,
        engine: &mut Engine,
        prompt: &[u32],
        options: SequenceOptions,
    ) -> brass::Result<(SequenceId, usize)> {
        let best = match self.on {
            true => engine
                .sequences()
                .into_iter()
                .map(|s| {
                    let rows = engine.reusable(s, prompt).unwrap_or(0);
                    (rows, self.order.contains(&s), s)
                })
                .filter(|&(rows, _, _)| rows > 0)
                .max(),
            false => None,
        };
        match best {
            Some((_, true, from)) => {
                let taken = engine.replace(from, prompt, options)?;
                self.order.retain(|&s| s != from);
                Ok(taken)
            }
            Some((_, false, from)) => {
                self.make_room(engine);
                engine.add_reusing(from, prompt, options)
            }
            None => {
                self.make_room(engine);
                Ok((engine.add(prompt, options)?, 0))
            }
        }
    }

    /// Takes a finished request out of the running ones, as `leave` does, its sequence
    /// held in the engine with its cache (the most recently used).
    fn keep<'t>(
        &mut self,
        active: &mut HashMap<SequenceId, Active<'t>>,
        seq: SequenceId,
        load: &Load,
    ) -> Option<Active<'t>> {
        let left = active.remove(&seq);
        if left.is_some() {
            self.order.push(seq);
        }
        load.running.store(active.len(), Ordering::Relaxed);
        left
    }

    /// Gives up the least recently used held sequence where every region is taken.
    fn make_room(&mut self, engine: &mut Engine) {
        if engine.sequences().len() >= engine.model().sequences() && !self.order.is_empty() {
            let _ = engine.remove(self.order.remove(0));
        }
    }

    fn drop_all(&mut self, engine: &mut Engine) {
        for seq in self.order.drain(..) {
            let _ = engine.remove(seq);
        }
    }
}

/// Takes a request out of the running ones and its sequence out of the engine (the two
/// go together: a sequence left in the engine would keep its cache region and its
/// row in every step), and out of `/health`'s count: before its last update is sent, so
/// a client that has its reply never sees itself counted as running.
fn leave<'t>(
    engine: &mut Engine,
    active: &mut HashMap<SequenceId, Active<'t>>,
    seq: SequenceId,
    load: &Load,
) -> Option<Active<'t>> {
    // An id the engine no longer holds (a request that left already) is no error here.
    let _ = engine.remove(seq);
    let left = active.remove(&seq);
    load.running.store(active.len(), Ordering::Relaxed);
    left
}

/// Cuts the text at the first stop string, holding back any end of it that may be the
/// start of one, so a stop string split over tokens never reaches the client.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops,
            held: String::new(),
        }
    }

    /// Adds text; returns what can be sent, and whether a stop string came (then the text
    /// ends before it and nothing more is to be sent).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s)).min() {
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        let keep = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.held[i..])))
            .unwrap_or(self.held.len());
        let out = self.held[..keep].to_string();
        self.held.drain(..keep);
        (out, false)
    }

    /// The text held back, at the end of the reply.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn a_stop_string_split_over_pieces_is_never_sent() {
        let mut m = StopMatcher::new(vec!["\n\nUser:".into(), "END".into()]);
        assert_eq!(m.push("Hello"), ("Hello".into(), false));
        assert_eq!(m.push(" world\n"), (" world".into(), false));
        assert_eq!(m.push("\nUs"), ("".into(), false));
        assert_eq!(m.push("er: hi"), ("".into(), true));
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("the EN"), ("the ".into(), false));
        assert_eq!(m.push("Dless"), ("".into(), true));
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("EN"), ("".into(), false));
        assert_eq!(m.push("ough"), ("ENough".into(), false));
        assert_eq!(m.push("E"), ("".into(), false));
        assert_eq!(m.flush(), "E");
    }

    #[test]
    fn the_earliest_stop_string_wins_and_text_is_cut_on_characters() {
        let mut m = StopMatcher::new(vec!["b".into(), "é!".into()]);
        assert_eq!(m.push("aé!xb"), ("a".into(), true));
        let mut m = StopMatcher::new(vec!["éa".into()]);
        assert_eq!(m.push("xyé"), ("xy".into(), false));
        assert_eq!(m.flush(), "é");
        let mut m = StopMatcher::new(Vec::new());
        assert_eq!(m.push("all of it"), ("all of it".into(), false));
    }
}
