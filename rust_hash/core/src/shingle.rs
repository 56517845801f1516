//! Set elements of a text for MinHash: words, word n-grams or character n-grams.
//!
//! Word boundaries are exactly those of Python's `str.split()`: the characters for which
//! `str.isspace()` is true, which are Unicode White_Space (Rust's `char::is_whitespace`) plus the
//! four information separators U+001C..U+001F (bidirectional class B or S). Word n-grams are
//! joined by one space. A text shorter than one n-gram gives a single shingle (the whole text), so short
//! observations still have a signature; a text with no words gives the empty set.

use crate::Error;
use std::num::NonZeroUsize;

/// How a text is cut into set elements. Runs are of `n >= 1` items (use [`Shingling::from_name`];
/// shingling with a run of 0 panics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shingling {
    /// Whitespace-separated words.
    Words,
    /// Runs of `n` consecutive words (observations: n = 3 keeps word order without being brittle).
    WordNgrams(usize),
    /// Runs of `n` consecutive characters (Unicode scalar values).
    CharNgrams(usize),
}

impl Shingling {
    /// The shingling named `name` (`"word"`, `"word_ngram"`, `"char_ngram"`), with runs of `n`.
    pub fn from_name(name: &str, n: NonZeroUsize) -> Result<Self, Error> {
        let n = n.get();
        match name {
            "word" => Ok(Self::Words),
            "word_ngram" => Ok(Self::WordNgrams(n)),
            "char_ngram" => Ok(Self::CharNgrams(n)),
            other => Err(Error::Unknown {
                param: "shingle",
                got: format!("{other:?}"),
                expected: "'word', 'word_ngram' or 'char_ngram'",
            }),
        }
    }
}

/// Reusable buffers for shingling, so that a batch allocates once per worker, not per text.
#[derive(Default)]
pub struct Scratch {
    /// Byte ranges of the words of the current text.
    spans: Vec<(usize, usize)>,
    /// A word n-gram rebuilt with single spaces, when the text separates its words otherwise.
    joined: String,
}

/// Whether Python's `str.isspace()` holds for `c`: White_Space or an information separator.
/// (`str.isspace` is bidirectional class WS, B or S, or category Zs; over all of Unicode that
/// is White_Space plus U+001C..U+001F, checked against the interpreter by the Python tests.)
#[inline]
pub fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Byte ranges of the words of `text`, as `str.split()` cuts them. ASCII text takes a
/// byte-level path (tab, LF, VT, FF, CR, U+001C..U+001F and space), which avoids decoding.
fn word_spans(text: &str, spans: &mut Vec<(usize, usize)>) {
    spans.clear();
    if text.is_ascii() {
        ascii_word_spans(text.as_bytes(), spans);
    } else {
        let mut start = None;
        for (i, c) in text.char_indices() {
            match (is_python_space(c), start) {
                (true, Some(s)) => {
                    spans.push((s, i));
                    start = None;
                }
                (false, None) => start = Some(i),
                _ => {}
            }
        }
        if let Some(s) = start {
            spans.push((s, text.len()));
        }
    }
}

/// Whether an ASCII byte is `str.split()` whitespace.
const ASCII_SPACE: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 256 {
        table[c] = c == 0x20 || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
        c += 1;
    }
    table
};

/// Word spans of ASCII bytes from 64-byte whitespace bitmasks: a word starts where a space bit
/// is followed by a non-space bit and ends at the next space bit, so the loop runs once per word
/// boundary instead of branching on every byte (word boundaries every few bytes are what a
/// branch predictor handles worst).
fn ascii_word_spans(bytes: &[u8], spans: &mut Vec<(usize, usize)>) {
    let mut open: Option<usize> = None;
    let mut previous_space = true; // before the text
    for (c, chunk) in bytes.chunks(64).enumerate() {
        let base = 64 * c;
        let space = space_mask(chunk);
        let before = (space << 1) | u64::from(previous_space); // bit j: byte j − 1 is a space
        let valid = if chunk.len() == 64 {
            u64::MAX
        } else {
            (1u64 << chunk.len()) - 1
        };
        let mut boundaries = (space ^ before) & valid; // starts (space → word) and ends (word → space)
        while boundaries != 0 {
            let j = boundaries.trailing_zeros() as usize;
            boundaries &= boundaries - 1;
            match open.take() {
                None => open = Some(base + j),
                Some(start) => spans.push((start, base + j)),
            }
        }
        previous_space = space >> (chunk.len() - 1) & 1 == 1;
    }
    if let Some(start) = open {
        spans.push((start, bytes.len()));
    }
}

/// Bit j set iff `chunk[j]` (at most 64 bytes) is whitespace.
#[inline]
fn space_mask(chunk: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if chunk.len() == 64 {
        // SAFETY: SSE2 is part of x86-64; the four loads read the 64 bytes of `chunk`.
        return unsafe { sse2::space_mask64(chunk) };
    }
    chunk.iter().enumerate().fold(0u64, |m, (j, &b)| {
        m | u64::from(ASCII_SPACE[usize::from(b)]) << j
    })
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    /// [`super::space_mask`] of exactly 64 bytes, 16 at a time: a byte is a space if it equals 0x20 or
    /// lies in 0x09..=0x0D or 0x1C..=0x1F (a range test as "x − lo, unsigned, is at most hi − lo").
    pub unsafe fn space_mask64(chunk: &[u8]) -> u64 {
        debug_assert_eq!(chunk.len(), 64);
        let in_range = |x: __m128i, lo: i8, width: i8| {
            let shifted = _mm_sub_epi8(x, _mm_set1_epi8(lo));
            _mm_cmpeq_epi8(_mm_min_epu8(shifted, _mm_set1_epi8(width)), shifted)
        };
        let mut mask = 0u64;
        for k in 0..4 {
            let x = _mm_loadu_si128(chunk.as_ptr().add(16 * k).cast());
            let space = _mm_or_si128(
                _mm_cmpeq_epi8(x, _mm_set1_epi8(0x20)),
                _mm_or_si128(in_range(x, 0x09, 4), in_range(x, 0x1c, 3)),
            );
            mask |= u64::from(_mm_movemask_epi8(space) as u16) << (16 * k);
        }
        mask
    }
}

/// Calls `emit` with the UTF-8 bytes of each shingle of `text`, in text order (duplicates kept).
pub fn for_each_shingle(
    text: &str,
    kind: Shingling,
    scratch: &mut Scratch,
    mut emit: impl FnMut(&[u8]),
) {
    let bytes = text.as_bytes();
    match kind {
        Shingling::Words => {
            word_spans(text, &mut scratch.spans);
            scratch.spans.iter().for_each(|&(s, e)| emit(&bytes[s..e]));
        }
        Shingling::WordNgrams(n) => {
            word_spans(text, &mut scratch.spans);
            let spans = &scratch.spans;
            if spans.is_empty() {
                return;
            }
            for window in spans.windows(n.min(spans.len())) {
                let (start, end) = (window[0].0, window[window.len() - 1].1);
                // Words already separated by single spaces: the text span is the shingle.
                let single_spaced = window
                    .windows(2)
                    .all(|p| p[1].0 == p[0].1 + 1 && bytes[p[0].1] == b' ');
                if single_spaced {
                    emit(&bytes[start..end]);
                    continue;
                }
                let joined = &mut scratch.joined;
                joined.clear();
                for (i, &(s, e)) in window.iter().enumerate() {
                    if i > 0 {
                        joined.push(' ');
                    }
                    joined.push_str(&text[s..e]);
                }
                emit(joined.as_bytes());
            }
        }
        Shingling::CharNgrams(n) => {
            if text.is_empty() {
                return;
            }
            if text.is_ascii() {
                // One byte per character: byte windows are character windows.
                text.as_bytes()
                    .windows(n.min(text.len()))
                    .for_each(&mut emit);
                return;
            }
            let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
            let chars = starts.len();
            let width = n.min(chars);
            for i in 0..=chars - width {
                let end = if i + width < chars {
                    starts[i + width]
                } else {
                    text.len()
                };
                emit(&text.as_bytes()[starts[i]..end]);
            }
        }
    }
}

/// The shingles of `text` as owned strings (for inspection and tests).
pub fn shingles(text: &str, kind: Shingling) -> Vec<String> {
    let mut out = Vec::new();
    for_each_shingle(text, kind, &mut Scratch::default(), |s| {
        out.push(String::from_utf8(s.to_vec()).expect("shingles are cut at char boundaries"))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's `str.isspace()` code points (CPython 3.11 and 3.12 agree).
    const PYTHON_SPACE: &[u32] = &[
        0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001,
        0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029,
        0x202f, 0x205f, 0x3000,
    ];

    #[test]
    fn ascii_spans_equal_a_byte_by_byte_split() {
        // Every length around the 64-byte chunks, from an alphabet heavy in separators.
        let alphabet = b"ab \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f!\x08\x0e\x1b\x7f";
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for len in 0..300 {
            for _ in 0..20 {
                let text: Vec<u8> = (0..len)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1);
                        alphabet[(state >> 33) as usize % alphabet.len()]
                    })
                    .collect();
                let mut expect = Vec::new();
                let mut start = None;
                for (i, &b) in text.iter().enumerate() {
                    match (ASCII_SPACE[usize::from(b)], start) {
                        (true, Some(s)) => {
                            expect.push((s, i));
                            start = None;
                        }
                        (false, None) => start = Some(i),
                        _ => {}
                    }
                }
                expect.extend(start.map(|s| (s, text.len())));
                let mut spans = Vec::new();
                ascii_word_spans(&text, &mut spans);
                assert_eq!(spans, expect, "{text:?}");
            }
        }
        for c in 0..128u8 {
            assert_eq!(
                ASCII_SPACE[usize::from(c)],
                is_python_space(char::from(c)),
                "{c:#x}"
            );
        }
    }

    #[test]
    fn spaces_are_pythons() {
        let ours: Vec<u32> = (0..=char::MAX as u32)
            .filter_map(char::from_u32)
            .filter(|&c| is_python_space(c))
            .map(u32::from)
            .collect();
        assert_eq!(ours, PYTHON_SPACE);
        // Every separator splits on both paths (ASCII and not), like `str.split()`.
        for &cp in PYTHON_SPACE {
            let sep = char::from_u32(cp).expect("valid");
            for tail in ["c", "é"] {
                let text = format!("a{sep}b {tail}{sep}");
                assert_eq!(
                    shingles(&text, Shingling::Words),
                    ["a", "b", tail],
                    "U+{cp:04X}"
                );
            }
        }
    }

    #[test]
    fn words_and_ngrams() {
        assert_eq!(shingles(" a  b\tc\n", Shingling::Words), ["a", "b", "c"]);
        // Every ASCII White_Space character separates words, as on the Unicode path.
        let ascii_ws = "a\tb\nc\x0bd\x0ce\rf g";
        assert_eq!(
            shingles(ascii_ws, Shingling::Words),
            ascii_ws.split_whitespace().collect::<Vec<_>>()
        );
        assert_eq!(shingles("a\x1cb\x1fc", Shingling::Words), ["a", "b", "c"]);
        assert_eq!(
            shingles("a\u{a0}b\u{2003}c", Shingling::Words),
            ["a", "b", "c"]
        );
        assert_eq!(
            shingles("a b c d", Shingling::WordNgrams(3)),
            ["a b c", "b c d"]
        );
        assert_eq!(shingles("a  b", Shingling::WordNgrams(3)), ["a b"]);
        assert_eq!(
            shingles("a b\tc d  e", Shingling::WordNgrams(2)),
            ["a b", "b c", "c d", "d e"]
        );
        assert!(shingles("   ", Shingling::WordNgrams(3)).is_empty());
    }

    #[test]
    fn char_ngrams_are_unicode_aware() {
        assert_eq!(shingles("abcd", Shingling::CharNgrams(3)), ["abc", "bcd"]);
        assert_eq!(shingles("äbçd", Shingling::CharNgrams(3)), ["äbç", "bçd"]);
        assert_eq!(shingles("ä", Shingling::CharNgrams(3)), ["ä"]);
        assert!(shingles("", Shingling::CharNgrams(3)).is_empty());
    }

    #[test]
    fn names() {
        let three = NonZeroUsize::new(3).unwrap();
        assert_eq!(
            Shingling::from_name("word_ngram", three),
            Ok(Shingling::WordNgrams(3))
        );
        assert_eq!(
            Shingling::from_name("lines", three)
                .unwrap_err()
                .to_string(),
            "shingle must be 'word', 'word_ngram' or 'char_ngram', got \"lines\""
        );
    }
}
