//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`: Llama 1/2, Mistral, TinyLlama), as
//! llama.cpp's `llm_tokenizer_spm_session` runs it: the text (spaces already escaped to
//! U+2581 '▁') starts as one symbol per character, and the adjacent pair whose
//! concatenation is the vocabulary token with the highest score is merged until no pair
//! forms a token. Symbols that are not tokens fall back to `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

#[derive(Debug)]
pub(crate) struct Spm {
    /// The token for each byte: `<0xXX>`, else the one-byte string itself.
    byte_tokens: [Option<u32>; 256],
    /// Used for a byte that has no token at all (llama.cpp aborts there).
    unk: Option<u32>,
}

impl Spm {
    pub fn new(token_to_id: &HashMap<String, u32>, unk: Option<u32>) -> Spm {
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = token_to_id.get(&hex).copied().or_else(|| {
                // A raw byte is only a key if it is ASCII (keys are UTF-8 strings).
                let raw = (b as u8).is_ascii().then(|| (b as u8 as char).to_string());
                raw.and_then(|raw| token_to_id.get(&raw).copied())
            });
        }
        Spm { byte_tokens, unk }
    }

    /// Appends the tokens of `text`, whose spaces are already escaped to '▁'.
    pub fn encode(
        &self,
        text: &str,
        token_to_id: &HashMap<String, u32>,
        scores: &[f32],
        out: &mut Vec<u32>,
    ) {
        let n = text.chars().count();
        if n == 0 {
            return;
        }
        let mut symbols: Vec<Symbol> = Vec::with_capacity(n);
        for (i, (start, c)) in text.char_indices().enumerate() {
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.wrapping_sub(1),
                next: if i + 1 < n { i + 1 } else { END },
            });
        }

        let score = |id: u32| scores.get(id as usize).copied().unwrap_or(0.0);
        let mut queue = BinaryHeap::new();
        let try_pair =
            |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: usize, right: usize| {
                if left == END || right == END {
                    return;
                }
                let (l, r) = (symbols[left], symbols[right]);
                let joined = &text[l.start..r.start + r.len];
                if let Some(&id) = token_to_id.get(joined) {
                    queue.push(Bigram {
                        score: score(id),
                        left,
                        right,
                        size: joined.len(),
                    });
                }
            };
        for left in 0..n - 1 {
            try_pair(&mut queue, &symbols, left, left + 1);
        }

        while let Some(bigram) = queue.pop() {
            let (l, r) = (symbols[bigram.left], symbols[bigram.right]);
            // Stale if either side was merged away or grew since the pair was ranked.
            if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size {
                continue;
            }
            symbols[bigram.left].len += r.len;
            symbols[bigram.left].next = r.next;
            symbols[bigram.right].len = 0;
            if r.next != END {
                symbols[r.next].prev = bigram.left;
            }
            try_pair(&mut queue, &symbols, l.prev, bigram.left);
            try_pair(&mut queue, &symbols, bigram.left, r.next);
        }

        let mut i = 0;
        while i != END {
            let sym = symbols[i];
            let piece = &text[sym.start..sym.start + sym.len];
            match token_to_id.get(piece) {
                Some(&id) => out.push(id),
                // Only single characters can miss (every merge result is a token).
                None => out.extend(
                    piece
                        .bytes()
                        .filter_map(|b| self.byte_tokens[b as usize].or(self.unk)),
                ),
            }
            i = sym.next;
        }
    }
}

const END: usize = usize::MAX;

#[derive(Clone, Copy, Debug)]
struct Symbol {
    /// Byte range in the text.
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

/// A pair whose concatenation is a token. Highest score first; among equal scores the
/// leftmost pair (llama.cpp's comparator).
#[derive(Clone, Copy, Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}
