//! GPT-2 style byte-level BPE: each word's bytes start as one symbol each, spelled with
//! GPT-2's printable byte characters, and the lowest-ranked merge among adjacent pairs is
//! applied until none applies (llama.cpp's `llm_tokenizer_bpe_session`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::unicode::byte_to_char;

/// Marks a symbol whose text is neither a token nor part of any merge.
const NO_PIECE: u32 = u32::MAX;

/// The merge table, over interned strings ("pieces"). A piece that is a vocabulary token
/// has the token's id; merge operands and results that are not tokens get ids from
/// `n_vocab` up, so that a merge is looked up by a pair of integers instead of by
/// concatenating strings.
#[derive(Debug)]
pub(crate) struct Bpe {
    n_vocab: u32,
    /// The piece of the one-character string each byte is spelled as.
    byte_piece: [u32; 256],
    merges: HashMap<(u32, u32), Merge>,
    /// Llama 3: a word that is a token as a whole is emitted without merging.
    ignore_merges: bool,
}

#[derive(Clone, Copy, Debug)]
struct Merge {
    rank: u32,
    result: u32,
}

impl Bpe {
    /// `merges` are `"left right"` lines in rank order. Lines llama.cpp cannot split (no
    /// space after the first byte) become the pair ("", "") as they do there: harmless,
    /// since no symbol is empty.
    pub fn new(
        token_to_id: &HashMap<String, u32>,
        n_vocab: u32,
        merges: &[String],
        ignore_merges: bool,
    ) -> Bpe {
        let mut extra: HashMap<String, u32> = HashMap::new();
        let mut intern = |text: &str| -> u32 {
            if let Some(&id) = token_to_id.get(text) {
                return id;
            }
            if let Some(&id) = extra.get(text) {
                return id;
            }
            let id = n_vocab + extra.len() as u32;
            extra.insert(text.to_owned(), id);
            id
        };

        let mut table = HashMap::with_capacity(merges.len());
        let mut joined = String::new();
        for (rank, line) in merges.iter().enumerate() {
            // Split at the first space after the first byte, so that a left operand
            // may itself start with a space (llama.cpp: `word.find(' ', 1)`).
            // The search is bytewise; ' ' is ASCII, so the split is on a char boundary.
            let space = line.bytes().skip(1).position(|b| b == b' ').map(|i| i + 1);
            let (left, right) = match space {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => ("", ""),
            };
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let key = (intern(left), intern(right));
            let merge = Merge {
                rank: rank as u32,
                result: intern(&joined),
            };
            // The first occurrence of a pair keeps its rank, as with llama.cpp's emplace.
            table.entry(key).or_insert(merge);
        }

        let mut byte_piece = [NO_PIECE; 256];
        let mut buf = [0u8; 4];
        for (b, piece) in byte_piece.iter_mut().enumerate() {
            let text = byte_to_char(b as u8).encode_utf8(&mut buf);
            *piece = token_to_id
                .get(&*text)
                .or_else(|| extra.get(&*text))
                .copied()
                .unwrap_or(NO_PIECE);
        }

        Bpe {
            n_vocab,
            byte_piece,
            merges: table,
            ignore_merges,
        }
    }

    /// Appends the tokens of one pre-tokenized word.
    pub fn encode_word(
        &self,
        word: &str,
        token_to_id: &HashMap<String, u32>,
        scratch: &mut Scratch,
        out: &mut Vec<u32>,
    ) {
        let bytes = word.as_bytes();
        if bytes.is_empty() {
            return;
        }
        if self.ignore_merges {
            scratch.spelled.clear();
            scratch
                .spelled
                .extend(bytes.iter().map(|&b| byte_to_char(b)));
            if let Some(&id) = token_to_id.get(&scratch.spelled) {
                out.push(id);
                return;
            }
        }

        // One symbol per byte, linked so merged-away symbols can be skipped.
        let symbols = &mut scratch.symbols;
        symbols.clear();
        symbols.extend(bytes.iter().enumerate().map(|(i, &b)| Symbol {
            piece: self.byte_piece[b as usize],
            start: i,
            len: 1,
            prev: i.wrapping_sub(1),
            next: if i + 1 < bytes.len() { i + 1 } else { END },
        }));

        let queue = &mut scratch.queue;
        queue.clear();
        for left in 0..symbols.len().saturating_sub(1) {
            self.push_pair(symbols, queue, left, left + 1);
        }

        // Lowest rank first; among equal ranks the leftmost pair (llama.cpp's order).
        while let Some(Reverse(Candidate {
            left,
            right,
            left_piece,
            right_piece,
            result,
            ..
        })) = queue.pop()
        {
            // A symbol's piece changes whenever it grows, so unchanged pieces mean the
            // pair is still adjacent and still what was ranked.
            if symbols[left].len == 0
                || symbols[right].len == 0
                || symbols[left].piece != left_piece
                || symbols[right].piece != right_piece
            {
                continue;
            }
            let next = symbols[right].next;
            symbols[left].piece = result;
            symbols[left].len += symbols[right].len;
            symbols[left].next = next;
            symbols[right].len = 0;
            if next != END {
                symbols[next].prev = left;
            }
            let prev = symbols[left].prev;
            if prev != END {
                self.push_pair(symbols, queue, prev, left);
            }
            if next != END {
                self.push_pair(symbols, queue, left, next);
            }
        }

        let mut i = 0;
        while i != END {
            let sym = symbols[i];
            if sym.piece < self.n_vocab {
                out.push(sym.piece);
            } else {
                // The merged text is not a token (only possible with inconsistent
                // merges): fall back to the tokens of its single bytes.
                out.extend(
                    bytes[sym.start..sym.start + sym.len]
                        .iter()
                        .map(|&b| self.byte_piece[b as usize])
                        .filter(|&p| p < self.n_vocab),
                );
            }
            i = sym.next;
        }
    }

    fn push_pair(
        &self,
        symbols: &[Symbol],
        queue: &mut BinaryHeap<Reverse<Candidate>>,
        left: usize,
        right: usize,
    ) {
        let (left_piece, right_piece) = (symbols[left].piece, symbols[right].piece);
        if left_piece == NO_PIECE || right_piece == NO_PIECE {
            return;
        }
        if let Some(m) = self.merges.get(&(left_piece, right_piece)) {
            queue.push(Reverse(Candidate {
                rank: m.rank,
                left,
                right,
                left_piece,
                right_piece,
                result: m.result,
            }));
        }
    }
}

const END: usize = usize::MAX;

#[derive(Clone, Copy, Debug)]
struct Symbol {
    piece: u32,
    /// Byte range in the word.
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

/// A rankable adjacent pair. Field order makes the derived ordering (rank, left, ...),
/// which is the priority llama.cpp uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    left: usize,
    right: usize,
    left_piece: u32,
    right_piece: u32,
    result: u32,
}

/// Buffers reused across the words of one `encode` call.
#[derive(Default)]
pub(crate) struct Scratch {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Reverse<Candidate>>,
    spelled: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[&str]) -> HashMap<String, u32> {
        tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect()
    }

    #[test]
    fn merges_apply_by_rank_then_position() {
        let tokens = ["a", "b", "c", "ab", "bc", "abc"];
        let map = vocab(&tokens);
        let merges: Vec<String> = ["b c", "a b", "a bc"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let bpe = Bpe::new(&map, tokens.len() as u32, &merges, false);
        let mut out = Vec::new();
        let mut scratch = Scratch::default();
        // "b c" has the best rank, so "abc" goes a + bc -> abc, never ab + c.
        bpe.encode_word("abc", &map, &mut scratch, &mut out);
        assert_eq!(out, [5]);
        out.clear();
        bpe.encode_word("abab", &map, &mut scratch, &mut out);
        assert_eq!(out, [3, 3]);
    }

    #[test]
    fn space_operands_and_non_token_results() {
        // 'Ġ' spells the space byte. "ĠĠ" is a merge result that is not a token.
        let tokens = ["Ġ", "x", "Ġx"];
        let map = vocab(&tokens);
        let merges: Vec<String> = ["Ġ Ġ", "Ġ x"].iter().map(|s| s.to_string()).collect();
        let bpe = Bpe::new(&map, tokens.len() as u32, &merges, false);
        let mut out = Vec::new();
        bpe.encode_word("  ", &map, &mut Scratch::default(), &mut out);
        assert_eq!(out, [0, 0]);
        out.clear();
        bpe.encode_word(" x", &map, &mut Scratch::default(), &mut out);
        assert_eq!(out, [2]);
    }
}
