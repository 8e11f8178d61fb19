//! Pre-tokenizers for byte-level BPE: split text into words before merges run, exactly
//! as llama.cpp does for each `tokenizer.ggml.pre` value.
//!
//! llama.cpp describes each pre-tokenizer as a list of regexes applied one after another;
//! each regex splits every piece left by the previous one, and both its matches and the
//! gaps between them become pieces. The GPT-2 and Llama 3 regexes are run by hand-written
//! matchers in llama.cpp (not by a regex engine), with quirks a regex engine would not
//! have, e.g. `\s+(?!\S)` looks only inside the current piece. This module re-implements
//! those matchers, and the simple regexes (`\p{N}`, `\p{N}+`, ...) as run matchers with
//! the same split semantics.

use super::unicode::CharClass;

/// A pre-tokenizer, named after llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*` group it follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`.
    Gpt2,
    /// Every digit on its own (`\p{N}`), then GPT-2 (SmolLM, StarCoder, Command-R, ...).
    Smollm,
    /// Llama 3: case-insensitive contractions, `[^\r\n\p{L}\p{N}]?\p{L}+`, numbers in
    /// groups of up to three, punctuation runs with trailing newlines, newline runs.
    Llama3,
    /// Qwen2: Llama 3 with single digits (`\p{N}` instead of `\p{N}{1,3}`).
    Qwen2,
    /// llama.cpp's fallback when the file names no pre-tokenizer: punctuation runs,
    /// GPT-2, number runs, then three-digit groups.
    Default,
}

impl PreTokenizer {
    /// Maps a `tokenizer.ggml.pre` value to its pre-tokenizer, using llama.cpp's name
    /// table. `None` for names llama.cpp knows but brass does not implement, or unknown.
    pub fn from_name(name: &str) -> Option<PreTokenizer> {
        Some(match name {
            "" | "default" => PreTokenizer::Default,
            // "gpt2" is not a name llama.cpp writes, but is the obvious spelling.
            "gpt2" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en"
            | "jina-v2-code" | "roberta-bpe" | "mpt" | "olmo" | "jais" | "trillion"
            | "granite-docling" | "exaone4" => PreTokenizer::Gpt2,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva-7b" | "mellum2" => PreTokenizer::Smollm,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "dbrx" | "smaug-bpe" => PreTokenizer::Llama3,
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" | "stablelm2"
            | "hunyuan" | "solar-open" => PreTokenizer::Qwen2,
            _ => return None,
        })
    }

    /// The Llama 3 names proper (not dbrx / smaug, which only share the regex). For
    /// exactly these llama.cpp sets `ignore_merges` (a word that is itself a token skips
    /// the merges) and adds BOS by default.
    pub(crate) fn is_llama3_family(name: &str) -> bool {
        matches!(
            name,
            "llama3"
                | "llama-v3"
                | "llama-bpe"
                | "falcon3"
                | "falcon-h1"
                | "pixtral"
                | "midm-2.0"
                | "lfm2"
        )
    }

    /// Splits `text` into the words BPE merges run on.
    pub fn split(self, text: &str) -> Vec<&str> {
        let mut words = Vec::new();
        self.split_into(text, &mut words);
        words
    }

    /// Splits `text` into words, appending them to `words`.
    pub(crate) fn split_into<'t>(self, text: &'t str, words: &mut Vec<&'t str>) {
        if text.is_empty() {
            return;
        }
        let chars: Vec<Cp> = text
            .char_indices()
            .map(|(at, c)| Cp {
                c,
                at,
                class: CharClass::of(c),
            })
            .collect();
        let mut pieces = vec![chars.len()];
        match self {
            PreTokenizer::Gpt2 => pieces = apply(&chars, &pieces, split_gpt2),
            PreTokenizer::Smollm => {
                pieces = apply(&chars, &pieces, |s, out| {
                    split_runs(s, out, |s, i| s[i].class.number as usize)
                });
                pieces = apply(&chars, &pieces, split_gpt2);
            }
            PreTokenizer::Llama3 => {
                pieces = apply(&chars, &pieces, |s, out| split_llama3(s, out, 3))
            }
            PreTokenizer::Qwen2 => {
                pieces = apply(&chars, &pieces, |s, out| split_llama3(s, out, 1))
            }
            PreTokenizer::Default => {
                pieces = apply(&chars, &pieces, |s, out| {
                    split_runs(s, out, |s, i| {
                        run_len(&s[i..], |cp| {
                            cp.class.punctuation || "$+<=>^~|".contains(cp.c)
                        })
                    })
                });
                pieces = apply(&chars, &pieces, split_gpt2);
                pieces = apply(&chars, &pieces, |s, out| {
                    split_runs(s, out, |s, i| run_len(&s[i..], |cp| cp.class.number))
                });
                pieces = apply(&chars, &pieces, |s, out| {
                    split_runs(s, out, |s, i| {
                        let three = s
                            .get(i..i + 3)
                            .is_some_and(|w| w.iter().all(|cp| cp.c.is_ascii_digit()));
                        if three {
                            3
                        } else {
                            0
                        }
                    })
                });
            }
        }

        let mut start = 0;
        for len in pieces {
            let from = chars[start].at;
            let to = chars.get(start + len).map_or(text.len(), |cp| cp.at);
            words.push(&text[from..to]);
            start += len;
        }
    }
}

/// One code point with its byte offset in the text and its classes.
#[derive(Clone, Copy, Debug)]
struct Cp {
    c: char,
    at: usize,
    class: CharClass,
}

/// Runs `stage` over each piece (given as lengths in code points) and collects the
/// lengths of the pieces it cuts them into.
fn apply(chars: &[Cp], pieces: &[usize], stage: impl Fn(&[Cp], &mut Vec<usize>)) -> Vec<usize> {
    let mut out = Vec::with_capacity(pieces.len() * 2);
    let mut start = 0;
    for &len in pieces {
        stage(&chars[start..start + len], &mut out);
        start += len;
    }
    out
}

fn run_len(s: &[Cp], pred: impl Fn(&Cp) -> bool) -> usize {
    s.iter().take_while(|cp| pred(cp)).count()
}

/// The split llama.cpp gets from a plain regex through `std::regex_iterator`: scanning
/// left to right, each match (`match_len(s, i) > 0` at position `i`) becomes a piece,
/// and so does each non-empty stretch between matches.
fn split_runs(s: &[Cp], out: &mut Vec<usize>, match_len: impl Fn(&[Cp], usize) -> usize) {
    let mut gap_start = 0;
    let mut i = 0;
    while i < s.len() {
        let len = match_len(s, i);
        if len == 0 {
            i += 1;
            continue;
        }
        if i > gap_start {
            out.push(i - gap_start);
        }
        out.push(len);
        i += len;
        gap_start = i;
    }
    if s.len() > gap_start {
        out.push(s.len() - gap_start);
    }
}

/// Cuts one piece into words. Positions past the end of the piece read as
/// [`CharClass::OUTSIDE`], which is how the lookahead `(?!\S)` ends up confined to it.
struct Cutter<'a> {
    s: &'a [Cp],
    out: &'a mut Vec<usize>,
    emitted: usize,
}

impl Cutter<'_> {
    fn class(&self, i: usize) -> CharClass {
        self.s.get(i).map_or(CharClass::OUTSIDE, |cp| cp.class)
    }

    fn char(&self, i: usize) -> Option<char> {
        self.s.get(i).map(|cp| cp.c)
    }

    /// Ends the current word at `end`.
    fn cut(&mut self, end: usize) {
        if end > self.emitted {
            self.out.push(end - self.emitted);
        }
        self.emitted = end;
    }

    /// Length of an English contraction (`'s`, `'t`, `'m`, `'d`, `'re`, `'ve`, `'ll`) at
    /// `pos`, or 0. Llama 3 matches it case-insensitively; only ASCII letters can lower
    /// to these, so ASCII lowering is exact.
    fn contraction(&self, pos: usize, ignore_case: bool) -> usize {
        if self.char(pos) != Some('\'') {
            return 0;
        }
        let fold = |c: Option<char>| {
            c.map(|c| {
                if ignore_case {
                    c.to_ascii_lowercase()
                } else {
                    c
                }
            })
        };
        let next = fold(self.char(pos + 1));
        if matches!(next, Some('s' | 't' | 'm' | 'd')) {
            return 2;
        }
        match (next, fold(self.char(pos + 2))) {
            (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => 3,
            _ => 0,
        }
    }

    /// The whitespace alternatives shared by GPT-2 and Llama 3, at a position where
    /// nothing else matched: `\s+(?!\S)` (a run followed by a non-space leaves its last
    /// space to prefix the next word), then `\s+`, then a lone code point.
    fn whitespace_or_single(&mut self, pos: usize) -> usize {
        let run = (pos..).take_while(|&i| self.class(i).whitespace).count();
        let end = if run > 1 && pos + run < self.s.len() {
            pos + run - 1
        } else if run > 0 {
            pos + run
        } else {
            pos + 1
        };
        self.cut(end);
        end
    }
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
fn split_gpt2(s: &[Cp], out: &mut Vec<usize>) {
    let mut cut = Cutter { s, out, emitted: 0 };
    let mut pos = 0;
    while pos < s.len() {
        let contraction = cut.contraction(pos, false);
        if contraction > 0 {
            pos += contraction;
            cut.cut(pos);
            continue;
        }

        // A space joins the word that follows it, whatever its kind.
        let space = s[pos].c == ' ';
        let head = if space {
            cut.class(pos + 1)
        } else {
            s[pos].class
        };
        let same_kind: Option<fn(CharClass) -> bool> = if head.letter {
            Some(|c| c.letter)
        } else if head.number {
            Some(|c| c.number)
        } else if head.is_other() {
            Some(CharClass::is_other)
        } else {
            None
        };
        if let Some(same_kind) = same_kind {
            pos += space as usize;
            while same_kind(cut.class(pos)) {
                pos += 1;
            }
            cut.cut(pos);
            continue;
        }

        pos = cut.whitespace_or_single(pos);
    }
}

/// Llama 3 (`max_digits` 3) and Qwen2 (`max_digits` 1):
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
fn split_llama3(s: &[Cp], out: &mut Vec<usize>, max_digits: usize) {
    let is_newline = |c: Option<char>| matches!(c, Some('\r' | '\n'));
    let mut cut = Cutter { s, out, emitted: 0 };
    let mut pos = 0;
    while pos < s.len() {
        let c = s[pos].c;
        let class = s[pos].class;

        let contraction = cut.contraction(pos, true);
        if contraction > 0 {
            pos += contraction;
            cut.cut(pos);
            continue;
        }

        // [^\r\n\p{L}\p{N}]?\p{L}+ : one leading non-letter, non-digit, non-newline
        // code point (often a space) may join a run of letters.
        if !(is_newline(Some(c)) || class.number) && (class.letter || cut.class(pos + 1).letter) {
            pos += 1;
            while cut.class(pos).letter {
                pos += 1;
            }
            cut.cut(pos);
            continue;
        }

        // \p{N}{1,max_digits}
        if class.number {
            let mut group_start = pos;
            while cut.class(pos).number {
                pos += 1;
                if pos - group_start >= max_digits {
                    cut.cut(pos);
                    group_start = pos;
                }
            }
            cut.cut(pos);
            continue;
        }

        //  ?[^\s\p{L}\p{N}]+[\r\n]* . llama.cpp tests the code point at `pos` (not the
        // one after the space) for being real; it always is, so only the kind of the
        // head matters, and a lone trailing space becomes a word of its own.
        let space = c == ' ';
        let head = if space { cut.class(pos + 1) } else { class };
        if !(head.whitespace || head.letter || head.number) {
            pos += space as usize;
            while cut.class(pos).is_other() {
                pos += 1;
            }
            while is_newline(cut.char(pos)) {
                pos += 1;
            }
            cut.cut(pos);
            continue;
        }

        // \s*[\r\n]+ : a whitespace run that contains newlines ends after the last one.
        let run = (pos..).take_while(|&i| cut.class(i).whitespace).count();
        if let Some(last_newline) = (pos..pos + run).rev().find(|&i| is_newline(cut.char(i))) {
            pos = last_newline + 1;
            cut.cut(pos);
            continue;
        }

        pos = cut.whitespace_or_single(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: PreTokenizer, text: &str) -> Vec<&str> {
        pre.split(text)
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            words(PreTokenizer::Gpt2, "I don't  think,  x\n\ny "),
            ["I", " don", "'t", " ", " think", ",", " ", " x", "\n", "\n", "y", " "]
        );
        assert_eq!(words(PreTokenizer::Gpt2, "   leading"), ["  ", " leading"]);
        assert_eq!(words(PreTokenizer::Gpt2, "a 123b"), ["a", " 123", "b"]);
    }

    #[test]
    fn smollm_splits_digits_first() {
        // The digit pass leaves " " as a piece of its own, so it cannot prefix "1".
        assert_eq!(
            words(PreTokenizer::Smollm, "is 1234"),
            ["is", " ", "1", "2", "3", "4"]
        );
        assert_eq!(words(PreTokenizer::Smollm, "x²"), ["x", "²"]);
    }

    #[test]
    fn llama3_words() {
        assert_eq!(
            words(PreTokenizer::Llama3, "I'M 12345 (ok)\n\n  x!!\n"),
            ["I", "'M", " ", "123", "45", " (", "ok", ")\n\n", " ", " x", "!!\n"]
        );
        assert_eq!(words(PreTokenizer::Qwen2, "12 ab"), ["1", "2", " ab"]);
    }

    #[test]
    fn default_words() {
        assert_eq!(
            words(PreTokenizer::Default, "a+b 12345"),
            ["a", "+", "b", " ", "123", "45"]
        );
    }
}
