//! The simhash package's text normalisation: `str.lower`, then the matches of
//! `[\w\u4e00-\u9fcc]` joined together.
//!
//! For ASCII the rule reduces to `[a-z0-9_]` after ASCII lowercasing ([`is_word_byte`], applied
//! while fingerprints stream). For other characters it follows the interpreter's Unicode version
//! (3.11 and 3.12 differ), so it is taken from the interpreter itself: a [`Table`] maps each code
//! point to the character it becomes, built page by page (4,096 code points) from the
//! interpreter's normalisation of each character of a page, the first time a text needs the page.
//!
//! This module is the table's one owner: its entries, their marks and its pages are defined here
//! and nowhere else (the interpreter only ever normalises text). Two cases are left to the
//! interpreter for the whole text ([`Outcome::Fallback`]): a capital sigma, whose lowercase
//! depends on its neighbours (`str.lower`'s one context rule), and a character that normalises to
//! several.

use std::sync::{Arc, Mutex};

/// log2 of the code points per table page.
pub const PAGE_BITS: u32 = 12;
const PAGE: usize = 1 << PAGE_BITS;
/// Pages covering every code point.
const PAGES: usize = (char::MAX as usize >> PAGE_BITS) + 1;

/// Entry mark: the character contributes nothing (not a word character once lowercased).
const DROP: u32 = u32::MAX;
/// Entry mark: the text is normalised by the interpreter as a whole.
const FALLBACK: u32 = u32::MAX - 1;

/// Lowercases to "σ" or, ending a word, "ς".
const CAPITAL_SIGMA: char = '\u{3A3}';

/// Whether an ASCII byte is a word character of the package's `[\w]` (after lowercasing).
#[inline(always)]
pub fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The built pages at one moment. Readers work on a snapshot, so a batch never waits for a build
/// and a build never changes what a running batch sees.
#[derive(Clone)]
pub struct Snapshot(Arc<Vec<Option<Arc<[u32]>>>>);

impl Snapshot {
    /// The entry of `c`: the code point it becomes or a mark; None while its page is not built.
    #[inline]
    fn entry(&self, c: char) -> Option<u32> {
        let cp = c as usize;
        self.0[cp >> PAGE_BITS]
            .as_ref()
            .map(|page| page[cp & (PAGE - 1)])
    }
}

/// The normalisation table of one interpreter (one per process in the extension).
pub struct Table {
    published: Mutex<Snapshot>,
}

impl Default for Table {
    fn default() -> Self {
        Self {
            published: Mutex::new(Snapshot(Arc::new(vec![None; PAGES]))),
        }
    }
}

impl Table {
    /// The pages built so far.
    pub fn snapshot(&self) -> Snapshot {
        self.published.lock().expect("table poisoned").clone()
    }

    /// Builds those of `pages` that are not built yet. `normalize` is the interpreter's
    /// normalisation of each of the texts it is given (one string per text); it is called once,
    /// with every character of those pages as its own text, and without the table locked.
    ///
    /// # Panics
    /// If `normalize` returns another number of strings than it was given texts.
    pub fn build<E>(
        &self,
        pages: &[u32],
        normalize: impl FnOnce(&[&str]) -> Result<Vec<String>, E>,
    ) -> Result<(), E> {
        let built = self.snapshot();
        let mut todo: Vec<usize> = pages
            .iter()
            .map(|&p| p as usize)
            .filter(|&p| built.0[p].is_none())
            .collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return Ok(());
        }
        // Each character of the pages as its own text (surrogates are no characters, and the
        // capital sigma's entry is fixed), in page order.
        let asked: Vec<char> = todo
            .iter()
            .flat_map(|&p| (p << PAGE_BITS) as u32..((p + 1) << PAGE_BITS) as u32)
            .filter_map(char::from_u32)
            .filter(|&c| c != CAPITAL_SIGMA)
            .collect();
        let mut buffers = [0u8; 4];
        let texts: Vec<String> = asked
            .iter()
            .map(|c| c.encode_utf8(&mut buffers).to_owned())
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let normalized = normalize(&refs)?;
        assert_eq!(normalized.len(), refs.len(), "one normalised text per text");
        let mut answers = normalized.iter();
        let new_pages: Vec<(usize, Arc<[u32]>)> = todo
            .iter()
            .map(|&p| {
                let page = (p << PAGE_BITS..(p + 1) << PAGE_BITS)
                    .map(|cp| match char::from_u32(cp as u32) {
                        None => DROP, // a surrogate: never in a str that has a UTF-8 form
                        Some(CAPITAL_SIGMA) => FALLBACK,
                        Some(_) => entry_of(answers.next().expect("one answer per character")),
                    })
                    .collect();
                (p, page)
            })
            .collect();
        let mut published = self.published.lock().expect("table poisoned");
        let mut pages = (*published.0).clone();
        for (p, page) in new_pages {
            pages[p].get_or_insert(page);
        }
        *published = Snapshot(Arc::new(pages));
        Ok(())
    }
}

/// The entry of a character whose normalisation is `normalized`.
fn entry_of(normalized: &str) -> u32 {
    let mut chars = normalized.chars();
    match (chars.next(), chars.next()) {
        (None, _) => DROP,
        (Some(c), None) => c as u32,
        _ => FALLBACK,
    }
}

/// How [`normalize_with`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `out` holds the normalised text.
    Done,
    /// The text needs the interpreter itself (a capital sigma, or a character that normalises
    /// to several).
    Fallback,
    /// Some of the text's pages are not built; their indices were pushed to `missing`.
    Missing,
}

/// Normalises `text` as the package does into `out`: ASCII characters directly, the others
/// through the pages of `table`. Missing pages are pushed to `missing` once each and win over a
/// fallback.
pub fn normalize_with(
    text: &str,
    table: &Snapshot,
    out: &mut String,
    missing: &mut Vec<u32>,
) -> Outcome {
    out.clear();
    let mut outcome = Outcome::Done;
    for c in text.chars() {
        if c.is_ascii() {
            if is_word_byte(c as u8) {
                out.push(c.to_ascii_lowercase());
            }
            continue;
        }
        match table.entry(c) {
            None => {
                let page = c as u32 >> PAGE_BITS;
                if !missing.contains(&page) {
                    missing.push(page);
                }
                outcome = Outcome::Missing;
            }
            Some(DROP) => {}
            Some(FALLBACK) => {
                if outcome == Outcome::Done {
                    outcome = Outcome::Fallback;
                }
            }
            Some(cp) => out.push(char::from_u32(cp).expect("entries are characters or marks")),
        }
    }
    outcome
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stand-in for the interpreter: Rust's lowercasing, then alphanumerics and `_`. (The
    /// extension's tests compare the real interpreter's rules over every code point.)
    pub(crate) fn rust_rules(texts: &[&str]) -> Result<Vec<String>, ()> {
        Ok(texts
            .iter()
            .map(|t| {
                t.to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect())
    }

    #[test]
    fn pages_follow_the_interpreter() {
        let table = Table::default();
        let (mut out, mut missing) = (String::new(), Vec::new());
        // Nothing built: every non-ASCII page is missing, reported once each.
        let norm = normalize_with("Σ🙂x🙂汉é", &table.snapshot(), &mut out, &mut missing);
        assert_eq!(norm, Outcome::Missing);
        assert_eq!(missing, [0, 0x1F642 >> PAGE_BITS, 0x6C49 >> PAGE_BITS]);
        let mut calls = 0;
        table
            .build(&missing, |texts| {
                calls += 1;
                rust_rules(texts)
            })
            .unwrap();
        // Built pages are not asked for again.
        table
            .build(&[0], |_| -> Result<Vec<String>, ()> {
                panic!("page 0 is built")
            })
            .unwrap();
        assert_eq!(calls, 1);
        let snapshot = table.snapshot();
        missing.clear();
        let norm = normalize_with("Ä-é ©B_1!", &snapshot, &mut out, &mut missing);
        assert_eq!((norm, out.as_str()), (Outcome::Done, "äéb_1"));
        // The capital sigma falls back; İ lowercases to "i" and a combining dot, which is dropped.
        assert_eq!(
            normalize_with("aΣ", &snapshot, &mut out, &mut missing),
            Outcome::Fallback
        );
        assert_eq!(
            normalize_with("İ", &snapshot, &mut out, &mut missing),
            Outcome::Done
        );
        assert_eq!(out, "i");
        assert_eq!(
            normalize_with("汉🙂", &snapshot, &mut out, &mut missing),
            Outcome::Done
        );
        assert_eq!(out, "汉");
        assert!(missing.is_empty());
        // A missing page wins over a fallback.
        assert_eq!(
            normalize_with("Σ\u{10400}", &snapshot, &mut out, &mut missing),
            Outcome::Missing
        );
    }

    #[test]
    fn entries() {
        assert_eq!(entry_of(""), DROP);
        assert_eq!(entry_of("ä"), 'ä' as u32);
        assert_eq!(entry_of("i\u{307}"), FALLBACK);
        assert_eq!(PAGES, 272);
    }
}
