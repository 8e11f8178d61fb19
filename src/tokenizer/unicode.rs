//! Unicode facts the tokenizers need: the character classes the pre-tokenizer regexes
//! ask about, and GPT-2's byte ↔ printable-character mapping.

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// The classes of one code point, as llama.cpp's pre-tokenizers see them.
///
/// `present` is false only for the sentinel returned past the end of a piece. llama.cpp
/// tests "is this a real code point" through its flags being non-zero, and every real
/// code point has at least one flag (unassigned ones carry UNDEFINED), so a separate
/// bit says the same thing here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CharClass {
    pub present: bool,
    /// `\p{L}`
    pub letter: bool,
    /// `\p{N}`
    pub number: bool,
    /// `\p{P}`
    pub punctuation: bool,
    /// `\s`: the Unicode White_Space property, which is exactly llama.cpp's whitespace
    /// set (Python `regex`'s `\s`), and what `char::is_whitespace` implements.
    pub whitespace: bool,
}

impl CharClass {
    /// The sentinel for positions outside the piece being split.
    pub const OUTSIDE: CharClass = CharClass {
        present: false,
        letter: false,
        number: false,
        punctuation: false,
        whitespace: false,
    };

    pub fn of(c: char) -> CharClass {
        let group = c.general_category_group();
        CharClass {
            present: true,
            letter: group == GeneralCategoryGroup::Letter,
            number: group == GeneralCategoryGroup::Number,
            punctuation: group == GeneralCategoryGroup::Punctuation,
            whitespace: c.is_whitespace(),
        }
    }

    /// `[^\s\p{L}\p{N}]` on a real code point.
    pub fn is_other(self) -> bool {
        self.present && !(self.whitespace || self.letter || self.number)
    }
}

/// GPT-2's byte-level BPE spells every byte as a printable character so that merges
/// never see raw control bytes or spaces: bytes that are already printable Latin-1
/// (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) stand for themselves, and the other 68 bytes are
/// given U+0100.. in byte order.
const fn is_self_mapped(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

const BYTE_TO_CHAR: [char; 256] = {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    let mut b = 0usize;
    while b < 256 {
        let cp = if is_self_mapped(b as u8) {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        table[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => panic!("GPT-2 byte map produced an invalid code point"),
        };
        b += 1;
    }
    table
};

/// The bytes that are not self-mapped, in order: `SHIFTED_BYTES[i]` is spelled U+0100 + i.
const SHIFTED_BYTES: [u8; 68] = {
    let mut table = [0u8; 68];
    let mut n = 0;
    let mut b = 0usize;
    while b < 256 {
        if !is_self_mapped(b as u8) {
            table[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    table
};

/// The printable character GPT-2's byte-level BPE uses for `byte`.
pub(crate) fn byte_to_char(byte: u8) -> char {
    BYTE_TO_CHAR[byte as usize]
}

/// The byte a byte-level BPE character stands for, if it is one of the 256.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 0x100 && is_self_mapped(cp as u8) {
        return Some(cp as u8);
    }
    let shifted = cp.checked_sub(0x100)?;
    SHIFTED_BYTES.get(shifted as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_round_trips_and_matches_gpt2() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(0xAD), 'Ń');
        assert_eq!(char_to_byte('Ā'), Some(0));
        assert_eq!(char_to_byte('中'), None);
    }

    #[test]
    fn classes() {
        assert!(CharClass::of('é').letter);
        assert!(CharClass::of('文').letter);
        assert!(CharClass::of('²').number);
        assert!(CharClass::of('\u{0B}').whitespace);
        assert!(CharClass::of('\u{3000}').whitespace);
        assert!(!CharClass::of('\u{1C}').whitespace);
        assert!(CharClass::of('…').punctuation);
        assert!(CharClass::of('🙂').is_other());
        assert!(!CharClass::OUTSIDE.is_other());
    }
}
