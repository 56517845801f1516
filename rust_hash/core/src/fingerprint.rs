//! SimHash fingerprints equal to the PyPI package `simhash` 2.1.2 (`Simhash(text).value`).
//!
//! The package lowercases the text, keeps the matches of `[\w\u4e00-\u9fcc]+` joined together
//! (see [`crate::normalize`]), takes character 4-grams (the whole string when shorter, even when
//! empty) weighted by count, and hashes each with MD5 (last 8 bytes, big-endian). Bit i is set
//! iff the weight of features with bit i set exceeds half the total weight.
//!
//! ASCII text is normalised while it streams (without a copy); other text goes through the
//! normalisation table, and [`fingerprint_texts`] assembles a batch: table pages and whole-text
//! normalisations come from the [`Interpreter`] the fingerprints must agree with.

use crate::memo::{bits_for_rows, DirectMapped};
use crate::normalize::{is_word_byte, normalize_with, Outcome, Snapshot, Table};
use crate::parallel::{map_blocks, Pool};
use md5::{Digest, Md5};
use rayon::prelude::*;

/// Width of the package's character shingles.
const WIDTH: usize = 4;

/// MD5 feature hash: the last 8 bytes of the digest, most significant bit first.
#[inline]
pub fn feature_hash(feature: &[u8]) -> u64 {
    let digest = Md5::digest(feature);
    u64::from_be_bytes(digest[8..16].try_into().expect("MD5 digests are 16 bytes"))
}

/// Memo of feature hashes for one block of texts: observation vocabularies are small, and MD5 costs about
/// ten times a table probe. Keyed by the feature's bytes zero-padded to 16 (a 4-gram of word
/// characters is at most 16 bytes and never contains NUL, so the padding is unambiguous).
pub struct FeatureCache {
    ascii: DirectMapped<u32, u64>,
    wide: DirectMapped<u128, u64>,
}

impl FeatureCache {
    /// A memo sized for a block of `rows` texts (16- and 32-byte slots).
    pub fn for_rows(rows: usize) -> Self {
        // ~250 character 4-grams per observation.
        let bits = bits_for_rows(rows, 256);
        Self {
            // 0xFF bytes never occur in UTF-8: all-ones keys mark vacant slots.
            ascii: DirectMapped::new(bits, u32::MAX),
            wide: DirectMapped::new(bits.saturating_sub(3).max(10), u128::MAX),
        }
    }

    /// Hash of an ASCII 4-gram given as its 4 bytes, little-endian.
    #[inline]
    fn hash_ascii4(&mut self, gram: u32) -> u64 {
        let index = u64::from(gram).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        self.ascii
            .get_or_compute(gram, index, || feature_hash(&gram.to_le_bytes()))
    }

    #[inline]
    fn hash(&mut self, feature: &[u8]) -> u64 {
        if feature.len() > 16 {
            return feature_hash(feature);
        }
        let mut padded = [0u8; 16];
        padded[..feature.len()].copy_from_slice(feature);
        self.hash_key(u128::from_le_bytes(padded), feature)
    }

    /// Hash of the feature `text[start..end]` (at most 16 bytes): where 16 bytes can be read from
    /// `start`, the key is one load and a mask instead of a copy into a padded buffer.
    #[inline]
    fn hash_in(&mut self, text: &[u8], start: usize, end: usize) -> u64 {
        let len = end - start;
        match text.get(start..start + 16) {
            Some(wide) if len <= 16 => {
                let mask = if len == 16 {
                    u128::MAX
                } else {
                    (1u128 << (8 * len)) - 1
                };
                let key = u128::from_le_bytes(wide.try_into().expect("16 bytes")) & mask;
                self.hash_key(key, &text[start..end])
            }
            _ => self.hash(&text[start..end]),
        }
    }

    #[inline]
    fn hash_key(&mut self, key: u128, feature: &[u8]) -> u64 {
        // Fibonacci hashing of the folded key picks the slot.
        let index = ((key as u64) ^ ((key >> 64) as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        self.wide
            .get_or_compute(key, index, || feature_hash(feature))
    }
}

/// `SPREAD[b]` has byte j equal to bit j of `b`: adding it counts 8 bits at once.
const SPREAD: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut j = 0;
        while j < 8 {
            if (b >> j) & 1 == 1 {
                table[b] |= 1 << (8 * j);
            }
            j += 1;
        }
        b += 1;
    }
    table
};

/// Per-bit counts of unweighted feature hashes. Counting runs in byte-wide lanes (8 table
/// lookups and adds per hash instead of 64 bit tests), flushed before a byte can overflow.
struct BitVote {
    lanes: [u64; 8],
    pending: u32,
    counts: [u64; 64],
    total: u64,
}

impl Default for BitVote {
    fn default() -> Self {
        Self {
            lanes: [0; 8],
            pending: 0,
            counts: [0; 64],
            total: 0,
        }
    }
}

impl BitVote {
    #[inline(always)]
    fn add(&mut self, h: u64) {
        for (k, lane) in self.lanes.iter_mut().enumerate() {
            *lane += SPREAD[((h >> (8 * k)) & 0xFF) as usize];
        }
        self.total += 1;
        self.pending += 1;
        if self.pending == 255 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        for (k, lane) in self.lanes.iter_mut().enumerate() {
            for j in 0..8 {
                self.counts[8 * k + j] += (*lane >> (8 * j)) & 0xFF;
            }
            *lane = 0;
        }
        self.pending = 0;
    }

    /// Bit i is set iff more than half of the features have it set.
    fn finish(mut self) -> u64 {
        self.flush();
        let total = self.total;
        threshold(&self.counts, |c| 2 * c > total)
    }
}

/// A source of feature hashes: a text, streamed into `add` in text order.
trait Features {
    fn stream(self, cache: &mut FeatureCache, add: impl FnMut(u64));
}

/// Raw ASCII text, normalised on the fly.
struct RawAscii<'a>(&'a [u8]);

impl Features for RawAscii<'_> {
    #[inline(always)]
    fn stream(self, cache: &mut FeatureCache, add: impl FnMut(u64)) {
        stream_ascii(self.0, cache, add)
    }
}

/// Text already normalised (UTF-8 of word characters only).
struct NormalizedText<'a>(&'a [u8]);

impl Features for NormalizedText<'_> {
    #[inline(always)]
    fn stream(self, cache: &mut FeatureCache, add: impl FnMut(u64)) {
        stream_normalized(self.0, cache, add)
    }
}

/// The fingerprint of a feature stream: the AVX2 vote where the CPU has it, else byte lanes.
fn vote(features: impl Features, cache: &mut FeatureCache) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { avx2::vote(features, cache) };
    }
    portable_vote(features, cache)
}

fn portable_vote(features: impl Features, cache: &mut FeatureCache) -> u64 {
    let mut vote = BitVote::default();
    features.stream(cache, |h| vote.add(h));
    vote.finish()
}

/// Fingerprint of ASCII text, normalised on the fly: word bytes are lowercased and streamed
/// through a 4-byte window, so no normalised copy is built. None when `text` is not ASCII.
pub fn fingerprint_ascii(text: &str, cache: &mut FeatureCache) -> Option<u64> {
    text.is_ascii()
        .then(|| vote(RawAscii(text.as_bytes()), cache))
}

/// Feeds the feature hashes of ASCII text to `add`, in text order.
#[inline(always)]
fn stream_ascii(text: &[u8], cache: &mut FeatureCache, mut add: impl FnMut(u64)) {
    let (mut window, mut kept) = (0u32, 0usize);
    for &c in text {
        if is_word_byte(c) {
            window = (window >> 8) | (u32::from(c.to_ascii_lowercase()) << 24);
            kept += 1;
            if kept >= WIDTH {
                add(cache.hash_ascii4(window));
            }
        }
    }
    if kept < WIDTH {
        // The whole (short, possibly empty) normalised text is the only feature.
        let bytes = window.to_le_bytes();
        add(cache.hash(&bytes[WIDTH - kept..]));
    }
}

/// The bit vote in AVX2: 64 byte counters in two registers; a hash's bits are spread to bytes
/// with one shuffle, masked, compared and subtracted (-1 = +1), flushed every 255 features.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{threshold, FeatureCache, Features};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2")]
    pub fn vote(features: impl Features, cache: &mut FeatureCache) -> u64 {
        // Byte k of the hash goes to counters 8k..8k+7 (each 128-bit lane holds the hash twice).
        let spread_lo = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        );
        let spread_hi = _mm256_setr_epi8(
            4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7,
            7, 7, 7,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let (mut lo, mut hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let mut counts = [0u64; 64];
        let (mut pending, mut total) = (0u32, 0u64);
        let flush = |lo: __m256i, hi: __m256i, counts: &mut [u64; 64]| {
            let mut bytes = [0u8; 64];
            // SAFETY: `bytes` holds 64 bytes, two unaligned 32-byte stores.
            unsafe {
                _mm256_storeu_si256(bytes.as_mut_ptr().cast(), lo);
                _mm256_storeu_si256(bytes.as_mut_ptr().add(32).cast(), hi);
            }
            counts
                .iter_mut()
                .zip(bytes)
                .for_each(|(c, b)| *c += u64::from(b));
        };
        features.stream(cache, |h| {
            let v = _mm256_set1_epi64x(h as i64);
            let set_lo = _mm256_cmpeq_epi8(
                _mm256_and_si256(_mm256_shuffle_epi8(v, spread_lo), bit),
                bit,
            );
            let set_hi = _mm256_cmpeq_epi8(
                _mm256_and_si256(_mm256_shuffle_epi8(v, spread_hi), bit),
                bit,
            );
            lo = _mm256_sub_epi8(lo, set_lo);
            hi = _mm256_sub_epi8(hi, set_hi);
            total += 1;
            pending += 1;
            if pending == 255 {
                flush(lo, hi, &mut counts);
                (lo, hi, pending) = (_mm256_setzero_si256(), _mm256_setzero_si256(), 0);
            }
        });
        flush(lo, hi, &mut counts);
        threshold(&counts, |c| 2 * c > total)
    }
}

/// Fingerprint of already normalised text (only word characters, lowercased).
pub fn fingerprint_normalized(norm: &[u8], cache: &mut FeatureCache) -> u64 {
    vote(NormalizedText(norm), cache)
}

/// Feeds the feature hashes of normalised text to `add`: its character 4-grams, or the whole
/// text when it has fewer than 4 characters. Windows are tracked by the byte offsets of the last
/// four characters, so no per-text index is built.
#[inline(always)]
fn stream_normalized(norm: &[u8], cache: &mut FeatureCache, mut add: impl FnMut(u64)) {
    let mut feature = |cache: &mut FeatureCache, start: usize, end: usize| {
        add(match <[u8; WIDTH]>::try_from(&norm[start..end]) {
            // Any 4-byte feature can use the 4-byte memo: it is keyed by the bytes themselves.
            Ok(gram) => cache.hash_ascii4(u32::from_le_bytes(gram)),
            Err(_) => cache.hash_in(norm, start, end),
        })
    };
    if norm.is_ascii() {
        if norm.len() <= WIDTH {
            feature(cache, 0, norm.len());
        } else {
            (0..=norm.len() - WIDTH).for_each(|i| feature(cache, i, i + WIDTH));
        }
        return;
    }
    // Byte offsets of the starts of the last WIDTH characters (a ring), and how many were seen.
    let mut starts = [0usize; WIDTH];
    let mut seen = 0usize;
    for (i, &byte) in norm.iter().enumerate() {
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: not the start of a character
        }
        if seen >= WIDTH {
            // The window of the WIDTH characters before this one ends here.
            feature(cache, starts[seen % WIDTH], i);
        }
        starts[seen % WIDTH] = i;
        seen += 1;
    }
    if seen >= WIDTH {
        feature(cache, starts[seen % WIDTH], norm.len());
    } else {
        feature(cache, 0, norm.len());
    }
}

/// Fingerprint of explicitly weighted features (`Simhash([(feature, weight), ...])`).
///
/// Weights are summed in f64; equal to the package for integer weights (exact sums) and for
/// any weights whose sums are exact in binary floating point.
pub fn fingerprint_weighted<'a>(features: impl IntoIterator<Item = (&'a [u8], f64)>) -> u64 {
    let mut sums = [0f64; 64];
    let mut total = 0f64;
    for (feature, w) in features {
        let h = feature_hash(feature);
        for (i, s) in sums.iter_mut().enumerate() {
            if (h >> i) & 1 == 1 {
                *s += w;
            }
        }
        total += w;
    }
    threshold(&sums, |s| s > total / 2.0)
}

fn threshold<T: Copy>(counts: &[T; 64], set: impl Fn(T) -> bool) -> u64 {
    counts.iter().enumerate().fold(
        0u64,
        |acc, (i, &c)| if set(c) { acc | (1 << i) } else { acc },
    )
}

/// Number of differing bits.
#[inline]
pub fn hamming(a: u64, b: u64) -> u32 {
    (a ^ b).count_ones()
}

/// What a SimHash batch needs from the interpreter whose Unicode rules it follows.
pub trait Interpreter {
    type Error;

    /// Runs `pass`, a parallel part of the batch (the bindings release the GIL around it).
    fn detach<T: Send>(&mut self, pass: impl FnOnce() -> T + Send) -> T;

    /// The package's normalisation of each of `texts` (`str.lower`, then the matches of
    /// `[\w\u4e00-\u9fcc]` joined), one string per text, by the interpreter's own rules.
    fn normalize(&mut self, texts: &[&str]) -> Result<Vec<String>, Self::Error>;
}

/// Fingerprints of `texts` (`simhash.Simhash(text).value` under `interpreter`'s rules), in
/// parallel on `pool`, with `table` (the interpreter's normalisation table) built as needed.
///
/// A first pass hashes ASCII texts directly and the others through `table`. The pages it lacked
/// are then built (one `normalize` call for all of them) and the texts that needed them hashed
/// again; what is left (a capital sigma) is normalised by the interpreter (one more call) and
/// hashed. A batch whose pages are built calls the interpreter only for capital sigmas.
pub fn fingerprint_texts<S: AsRef<str> + Sync, I: Interpreter>(
    texts: &[S],
    table: &Table,
    pool: &Pool,
    interpreter: &mut I,
) -> Result<Vec<u64>, I::Error> {
    let first = interpreter.detach(|| table_pass(texts, &table.snapshot(), pool));
    let (mut values, mut pending) = (first.values, first.pending);
    if !first.missing.is_empty() {
        table.build(&first.missing, |chars| interpreter.normalize(chars))?;
        let waiting: Vec<&str> = pending.iter().map(|&i| texts[i].as_ref()).collect();
        let again = interpreter.detach(|| table_pass(&waiting, &table.snapshot(), pool));
        debug_assert!(again.missing.is_empty(), "every missing page was built");
        for (&i, value) in pending.iter().zip(again.values) {
            values[i] = value;
        }
        pending = again.pending.iter().map(|&j| pending[j]).collect();
    }
    if !pending.is_empty() {
        let waiting: Vec<&str> = pending.iter().map(|&i| texts[i].as_ref()).collect();
        let normalized = interpreter.normalize(&waiting)?;
        let again = interpreter.detach(|| fingerprint_normalized_texts(&normalized, pool));
        for (&i, value) in pending.iter().zip(again) {
            values[i] = value;
        }
    }
    Ok(values)
}

/// One pass over a batch: fingerprints (0 where pending), the rows left pending (the table could
/// not normalise them), and the pages the table lacked.
struct TablePass {
    values: Vec<u64>,
    pending: Vec<usize>,
    missing: Vec<u32>,
}

fn table_pass<S: AsRef<str> + Sync>(texts: &[S], table: &Snapshot, pool: &Pool) -> TablePass {
    let blocks = map_blocks(pool, texts, |start, block| {
        let mut cache = FeatureCache::for_rows(block.len());
        let (mut norm, mut pending, mut missing) = (String::new(), Vec::new(), Vec::new());
        let values: Vec<u64> = block
            .iter()
            .enumerate()
            .map(|(j, text)| {
                let text = text.as_ref();
                if let Some(fp) = fingerprint_ascii(text, &mut cache) {
                    return fp;
                }
                match normalize_with(text, table, &mut norm, &mut missing) {
                    Outcome::Done => fingerprint_normalized(norm.as_bytes(), &mut cache),
                    Outcome::Fallback | Outcome::Missing => {
                        pending.push(start + j);
                        0
                    }
                }
            })
            .collect();
        (values, pending, missing)
    });
    let mut pass = TablePass {
        values: Vec::with_capacity(texts.len()),
        pending: Vec::new(),
        missing: Vec::new(),
    };
    for (values, pending, missing) in blocks {
        pass.values.extend(values);
        pass.pending.extend(pending);
        pass.missing.extend(missing);
    }
    pass.missing.sort_unstable();
    pass.missing.dedup();
    pass
}

/// Fingerprints of already normalised texts, in parallel on `pool`.
pub fn fingerprint_normalized_texts<S: AsRef<[u8]> + Sync>(texts: &[S], pool: &Pool) -> Vec<u64> {
    map_blocks(pool, texts, |_, block| {
        let mut cache = FeatureCache::for_rows(block.len());
        block
            .iter()
            .map(|t| fingerprint_normalized(t.as_ref(), &mut cache))
            .collect::<Vec<u64>>()
    })
    .concat()
}

/// Fingerprints of weighted feature lists, in parallel on `pool`: document i owns
/// `features[offsets[i]..offsets[i + 1]]` and their `weights`.
///
/// # Panics
/// Unless `offsets` runs from 0 to `features.len()`, non-decreasing, with one weight per feature.
pub fn fingerprint_weighted_documents<F: AsRef<[u8]> + Sync>(
    features: &[F],
    weights: &[f64],
    offsets: &[usize],
    pool: &Pool,
) -> Vec<u64> {
    assert!(
        weights.len() == features.len()
            && offsets.first() == Some(&0)
            && offsets.last() == Some(&features.len())
            && offsets.windows(2).all(|p| p[0] <= p[1]),
        "offsets must run from 0 to len(features), non-decreasing, with one weight per feature"
    );
    pool.install(|| {
        offsets
            .par_windows(2)
            .map(|p| {
                fingerprint_weighted(
                    features[p[0]..p[1]]
                        .iter()
                        .map(|f| f.as_ref())
                        .zip(weights[p[0]..p[1]].iter().copied()),
                )
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The package's normalisation restricted to ASCII, written out as the reference for the
    /// streaming version: lowercase, keep `[a-z0-9_]`. False when `text` is not ASCII.
    fn normalize_ascii(text: &str, out: &mut Vec<u8>) -> bool {
        if !text.is_ascii() {
            return false;
        }
        out.clear();
        out.extend(
            text.bytes()
                .map(|c| c.to_ascii_lowercase())
                .filter(|&c| is_word_byte(c)),
        );
        true
    }

    fn of_text(text: &str) -> u64 {
        let mut cache = FeatureCache::for_rows(1);
        let streamed = fingerprint_ascii(text, &mut cache).expect("ASCII text");
        let mut vote = BitVote::default();
        stream_ascii(text.as_bytes(), &mut cache, |h| vote.add(h));
        assert_eq!(
            vote.finish(),
            streamed,
            "portable and dispatched votes differ"
        );
        let mut norm = Vec::new();
        assert!(normalize_ascii(text, &mut norm));
        assert_eq!(fingerprint_normalized(&norm, &mut cache), streamed);
        streamed
    }

    #[test]
    fn package_values() {
        // simhash.Simhash(text).value with simhash 2.1.2.
        assert_eq!(of_text(""), EMPTY);
        assert_eq!(of_text("How are you? I am fine. Thanks."), HOW_ARE_YOU);
        for short in ["a", "Ab!", "a_b", "x y z w"] {
            of_text(short);
        }
        // Over 255 features: exercises the flush of the byte counters.
        of_text(&"You see a cabinet 1, a drawer 2. ".repeat(40));
    }

    const EMPTY: u64 = 16_825_458_760_271_544_958;
    const HOW_ARE_YOU: u64 = 3_419_227_768_443_824_139;

    #[test]
    fn byte_lane_vote_survives_flushes() {
        // 600 copies of one feature (several flushes) and 599 of another: the majority wins.
        let (x, y) = (0xF0F0_0000_FFFF_0001u64, 0x0FF0_FFFF_0000_0003u64);
        let mut vote = BitVote::default();
        (0..600).for_each(|_| vote.add(x));
        (0..599).for_each(|_| vote.add(y));
        assert_eq!(vote.finish(), x);
    }

    #[test]
    fn normalisation() {
        let mut out = Vec::new();
        assert!(normalize_ascii("A b_C-1!", &mut out));
        assert_eq!(out, b"ab_c1");
        assert!(!normalize_ascii("é", &mut out));
    }

    /// The package's features of normalised text, written out: character 4-grams (or the whole
    /// text when shorter), each MD5-hashed, voted bit by bit.
    fn naive_normalized(norm: &str) -> u64 {
        let chars: Vec<char> = norm.chars().collect();
        let features: Vec<String> = if chars.len() <= WIDTH {
            vec![norm.to_owned()]
        } else {
            chars.windows(WIDTH).map(|w| w.iter().collect()).collect()
        };
        let mut vote = BitVote::default();
        features
            .iter()
            .for_each(|f| vote.add(feature_hash(f.as_bytes())));
        vote.finish()
    }

    #[test]
    fn normalized_windows_equal_naive() {
        let mut cache = FeatureCache::for_rows(1);
        for norm in [
            "",
            "é",
            "éa",
            "éab",
            "éabc",
            "abcdé",
            "äöüß",
            "汉字测试文本",
            "a🙂b🙂c🙂d",
            "x_1é汉🙂",
            "ab",
            "abcd",
            "abcde",
        ] {
            let long = norm.repeat(70); // over 255 features: the vote's flushes too
            for text in [norm, long.as_str()] {
                let expect = naive_normalized(text);
                assert_eq!(fingerprint_normalized(text.as_bytes(), &mut cache), expect);
                assert_eq!(
                    portable_vote(NormalizedText(text.as_bytes()), &mut cache),
                    expect
                );
            }
        }
    }

    #[test]
    fn weighted_equals_counted() {
        let counted = of_text("abcdeabcd");
        let weighted = fingerprint_weighted(vec![
            (&b"abcd"[..], 2.0),
            (&b"bcde"[..], 1.0),
            (&b"cdea"[..], 1.0),
            (&b"deab"[..], 1.0),
            (&b"eabc"[..], 1.0),
        ]);
        assert_eq!(counted, weighted);
        assert_eq!(hamming(0b1011, 0b0001), 2);
    }

    /// An interpreter with Rust's Unicode rules, counting its calls.
    #[derive(Default)]
    struct Counting {
        normalize_calls: usize,
        passes: usize,
    }

    impl Interpreter for Counting {
        type Error = ();

        fn detach<T: Send>(&mut self, pass: impl FnOnce() -> T + Send) -> T {
            self.passes += 1;
            pass()
        }

        fn normalize(&mut self, texts: &[&str]) -> Result<Vec<String>, ()> {
            self.normalize_calls += 1;
            crate::normalize::tests::rust_rules(texts)
        }
    }

    #[test]
    fn batches_equal_text_by_text() {
        // 3,000 texts on two threads (several blocks): ASCII, other scripts, capital sigmas.
        let texts: Vec<String> = (0..3000)
            .map(|i| match i % 5 {
                0 => format!("You see a cabinet {i}."),
                1 => format!("Küche {i} – Straße"),
                2 => format!("ΟΔΟΣ {i} Σ"),
                3 => format!("汉字 {i} 🙂"),
                _ => "Ä".repeat(i % 7),
            })
            .collect();
        let expect: Vec<u64> = texts
            .iter()
            .map(|t| {
                let norm = crate::normalize::tests::rust_rules(&[t.as_str()]).unwrap();
                fingerprint_normalized(norm[0].as_bytes(), &mut FeatureCache::for_rows(1))
            })
            .collect();
        let (table, pool) = (Table::default(), Pool::with_threads(2).unwrap());
        let mut first = Counting::default();
        assert_eq!(
            fingerprint_texts(&texts, &table, &pool, &mut first),
            Ok(expect.clone())
        );
        // Pages first, then the sigmas; each followed by a parallel pass.
        assert_eq!((first.normalize_calls, first.passes), (2, 3));
        let mut again = Counting::default();
        assert_eq!(
            fingerprint_texts(&texts, &table, &pool, &mut again),
            Ok(expect.clone())
        );
        assert_eq!((again.normalize_calls, again.passes), (1, 2));
        let no_sigma: Vec<&String> = texts.iter().filter(|t| !t.contains('Σ')).collect();
        let mut plain = Counting::default();
        let values = fingerprint_texts(&no_sigma, &table, &pool, &mut plain).unwrap();
        assert_eq!((plain.normalize_calls, plain.passes), (0, 1));
        assert_eq!(values.len(), no_sigma.len());
        let normalized: Vec<String> = texts
            .iter()
            .map(|t| {
                crate::normalize::tests::rust_rules(&[t.as_str()])
                    .unwrap()
                    .remove(0)
            })
            .collect();
        assert_eq!(fingerprint_normalized_texts(&normalized, &pool), expect);
    }

    #[test]
    fn weighted_documents() {
        let features = ["abcd", "bcde", "x", "y"];
        let weights = [2.0, 1.0, 1.0, 3.0];
        let values =
            fingerprint_weighted_documents(&features, &weights, &[0, 2, 2, 4], &Pool::default());
        assert_eq!(
            values[0],
            fingerprint_weighted(vec![(&b"abcd"[..], 2.0), (&b"bcde"[..], 1.0)])
        );
        assert_eq!(values[1], fingerprint_weighted(Vec::<(&[u8], f64)>::new()));
        assert_eq!(
            values[2],
            fingerprint_weighted(vec![(&b"x"[..], 1.0), (&b"y"[..], 3.0)])
        );
    }
}
