//! MinHash signatures, lane for lane equal to datasketch 2.0 `MinHash.update_batch`.
//!
//! Both of datasketch's 32-bit schemes are implemented; the permutation parameters (a, b) are
//! drawn by the caller exactly as datasketch draws them (numpy's legacy `RandomState`), so this
//! module only applies them. Token hash: the first 4 bytes of SHA-1, little-endian.

use crate::memo::{bits_for_rows, DirectMapped};
use crate::parallel::{memo_block, Pool};
use crate::shingle::{for_each_shingle, Scratch, Shingling};
use crate::Error;
use rayon::prelude::*;
use sha1::{Digest, Sha1};
use std::borrow::Cow;

/// Mersenne prime 2^61 - 1 of the legacy scheme.
const MERSENNE_61: u64 = (1 << 61) - 1;

/// A permutation scheme of datasketch 2.0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Affine32,
    Legacy,
}

impl Scheme {
    /// The scheme named `name` (`"affine32"` or `"legacy"`, datasketch's names).
    pub fn from_name(name: &str) -> Result<Self, Error> {
        match name {
            "affine32" => Ok(Self::Affine32),
            "legacy" => Ok(Self::Legacy),
            other => Err(Error::Unknown {
                param: "scheme",
                got: format!("{other:?}"),
                expected: "'affine32' or 'legacy'",
            }),
        }
    }
}

/// A permutation scheme of datasketch 2.0 together with its drawn parameters.
#[derive(Clone, Debug)]
pub enum Permutations {
    /// `phv = (a * fmix32(h) + b) mod 2^32`, stored as uint32 (datasketch's default since 2.0).
    Affine32 { a: Vec<u32>, b: Vec<u32> },
    /// `phv = (((a * h + b) mod 2^64) mod (2^61 - 1)) & 0xFFFFFFFF`, stored as uint64.
    Legacy { a: Vec<u64>, b: Vec<u64> },
}

impl Permutations {
    /// The permutations of `scheme` with parameters `a` and `b` (one pair per lane, as datasketch
    /// draws them; affine32 parameters are below 2^32 and kept as u32).
    ///
    /// # Panics
    /// If `a` and `b` differ in length.
    pub fn new(scheme: Scheme, a: &[u64], b: &[u64]) -> Self {
        assert_eq!(a.len(), b.len(), "one (a, b) pair per permutation");
        match scheme {
            Scheme::Affine32 => Self::Affine32 {
                a: a.iter().map(|&x| x as u32).collect(),
                b: b.iter().map(|&x| x as u32).collect(),
            },
            Scheme::Legacy => Self::Legacy {
                a: a.to_vec(),
                b: b.to_vec(),
            },
        }
    }

    pub fn num_perm(&self) -> usize {
        match self {
            Self::Affine32 { a, .. } => a.len(),
            Self::Legacy { a, .. } => a.len(),
        }
    }
}

/// SHA-1's initial state (FIPS 180-4, 5.3.1).
const SHA1_INIT: [u32; 5] = [
    0x6745_2301,
    0xEFCD_AB89,
    0x98BA_DCFE,
    0x1032_5476,
    0xC3D2_E1F0,
];

/// datasketch's `sha1_hash32`: the first 4 bytes of SHA-1, read little-endian.
///
/// A token of at most 55 bytes (every word n-gram of an observation) fits one padded block, which
/// goes straight to the compression function: the streaming `Digest` API's buffering and
/// finalisation cost about as much as compressing the block.
#[inline]
pub fn sha1_hash32(token: &[u8]) -> u32 {
    if token.len() <= 55 {
        // The token, the 0x80 marker, zeros, and the message length in bits (big-endian).
        let mut block = [0u8; 64];
        block[..token.len()].copy_from_slice(token);
        block[token.len()] = 0x80;
        block[56..].copy_from_slice(&(8 * token.len() as u64).to_be_bytes());
        let mut state = SHA1_INIT;
        sha1::compress(&mut state, &[block.into()]);
        // The digest starts with state[0], big-endian; datasketch reads those 4 bytes little-endian.
        return state[0].swap_bytes();
    }
    let digest = Sha1::digest(token);
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// MurmurHash3's 32-bit finalizer, the pre-mix of the affine32 scheme.
#[inline]
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85EB_CA6B);
    h ^= h >> 13;
    h = h.wrapping_mul(0xC2B2_AE35);
    h ^ (h >> 16)
}

/// Folds token hashes into an affine32 signature.
///
/// Lanes are processed in register-resident blocks while all hashes stream past (loop
/// interchange). On x86-64 with AVX2 (picked at run time: 32-bit `mullo` and `min` need more
/// than the baseline target of a portable wheel), 32 lanes are updated per broadcast hash.
pub fn fold_affine32(a: &[u32], b: &[u32], hashes: &[u32], sig: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { avx2::fold_affine32(a, b, hashes, sig) };
    }
    fold_affine32_blocked::<8>(a, b, hashes, sig)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{fmix32, fold_affine32_blocked, fold_legacy_scalar, MERSENNE_61};
    use std::arch::x86_64::*;

    /// The legacy fold, 8 lanes (two registers) per pass while all hashes stream past. AVX2 has
    /// no 64-bit multiply, so a · h = a_lo · h + (a_hi · h) << 32 (mod 2^64) from two 32 × 32 → 64
    /// multiplies; x mod (2^61 − 1) = (x & p) + (x >> 61), less p once if that reaches p. Every
    /// value compared is below 2^62, where AVX2's signed 64-bit compare is also the unsigned one.
    #[target_feature(enable = "avx2")]
    pub fn fold_legacy(a: &[u64], b: &[u64], hashes: &[u32], sig: &mut [u64]) {
        const LANES: usize = 8;
        let full = sig.len() - sig.len() % LANES;
        let p = _mm256_set1_epi64x(MERSENNE_61 as i64);
        let below_p = _mm256_set1_epi64x(MERSENNE_61 as i64 - 1);
        let low32 = _mm256_set1_epi64x(0xFFFF_FFFF);
        let lane = |s: __m256i, a: __m256i, a_hi: __m256i, b: __m256i, h: __m256i| {
            let product = _mm256_add_epi64(
                _mm256_mul_epu32(a, h),
                _mm256_slli_epi64(_mm256_mul_epu32(a_hi, h), 32),
            );
            let x = _mm256_add_epi64(product, b);
            let r = _mm256_add_epi64(_mm256_and_si256(x, p), _mm256_srli_epi64(x, 61));
            let r = _mm256_sub_epi64(r, _mm256_and_si256(_mm256_cmpgt_epi64(r, below_p), p));
            let v = _mm256_and_si256(r, low32);
            _mm256_blendv_epi8(s, v, _mm256_cmpgt_epi64(s, v))
        };
        for start in (0..full).step_by(LANES) {
            let load = |v: &[u64], k: usize| {
                // SAFETY: start + 4k + 4 <= full <= len, an unaligned 32-byte load in bounds.
                unsafe { _mm256_loadu_si256(v.as_ptr().add(start + 4 * k).cast()) }
            };
            let (a0, a1) = (load(a, 0), load(a, 1));
            let (a0_hi, a1_hi) = (_mm256_srli_epi64(a0, 32), _mm256_srli_epi64(a1, 32));
            let (b0, b1) = (load(b, 0), load(b, 1));
            let (mut s0, mut s1) = (load(sig, 0), load(sig, 1));
            for &h in hashes {
                let h = _mm256_set1_epi64x(i64::from(h));
                s0 = lane(s0, a0, a0_hi, b0, h);
                s1 = lane(s1, a1, a1_hi, b1, h);
            }
            for (k, s) in [s0, s1].into_iter().enumerate() {
                // SAFETY: as for the loads.
                unsafe { _mm256_storeu_si256(sig.as_mut_ptr().add(start + 4 * k).cast(), s) };
            }
        }
        fold_legacy_scalar(&a[full..], &b[full..], hashes, &mut sig[full..]);
    }

    /// Four 8-lane accumulators per pass: the multiply latency of one block hides behind the
    /// other three, and each broadcast hash serves 32 lanes.
    #[target_feature(enable = "avx2")]
    pub fn fold_affine32(a: &[u32], b: &[u32], hashes: &[u32], sig: &mut [u32]) {
        const LANES: usize = 32;
        let full = sig.len() - sig.len() % LANES;
        let mixed: Vec<__m256i> = hashes
            .iter()
            .map(|&h| _mm256_set1_epi32(fmix32(h) as i32))
            .collect();
        for start in (0..full).step_by(LANES) {
            let load = |v: &[u32], k: usize| {
                // SAFETY: start + 8k + 8 <= full <= len, an unaligned 32-byte load in bounds.
                unsafe { _mm256_loadu_si256(v.as_ptr().add(start + 8 * k).cast()) }
            };
            let (a0, a1, a2, a3) = (load(a, 0), load(a, 1), load(a, 2), load(a, 3));
            let (b0, b1, b2, b3) = (load(b, 0), load(b, 1), load(b, 2), load(b, 3));
            let (mut s0, mut s1, mut s2, mut s3) =
                (load(sig, 0), load(sig, 1), load(sig, 2), load(sig, 3));
            for &h in &mixed {
                s0 = _mm256_min_epu32(s0, _mm256_add_epi32(_mm256_mullo_epi32(a0, h), b0));
                s1 = _mm256_min_epu32(s1, _mm256_add_epi32(_mm256_mullo_epi32(a1, h), b1));
                s2 = _mm256_min_epu32(s2, _mm256_add_epi32(_mm256_mullo_epi32(a2, h), b2));
                s3 = _mm256_min_epu32(s3, _mm256_add_epi32(_mm256_mullo_epi32(a3, h), b3));
            }
            for (k, s) in [s0, s1, s2, s3].into_iter().enumerate() {
                // SAFETY: as for the loads.
                unsafe { _mm256_storeu_si256(sig.as_mut_ptr().add(start + 8 * k).cast(), s) };
            }
        }
        let (a, b, sig) = (&a[full..], &b[full..], &mut sig[full..]);
        fold_affine32_blocked::<8>(a, b, hashes, sig);
    }
}

/// The fold with `BLOCK` lanes kept in one vector register per block.
#[inline(always)]
fn fold_affine32_blocked<const BLOCK: usize>(
    a: &[u32],
    b: &[u32],
    hashes: &[u32],
    sig: &mut [u32],
) {
    // Pre-mixed hashes in stack-sized batches: no allocation per signature.
    let mut mixed = [0u32; 64];
    for batch in hashes.chunks(mixed.len()) {
        let mixed = &mut mixed[..batch.len()];
        mixed
            .iter_mut()
            .zip(batch)
            .for_each(|(m, &h)| *m = fmix32(h));
        let blocks = sig
            .chunks_exact_mut(BLOCK)
            .zip(a.chunks_exact(BLOCK))
            .zip(b.chunks_exact(BLOCK));
        for ((s, ak), bk) in blocks {
            let mut acc: [u32; BLOCK] = (&*s).try_into().expect("one block");
            for &h in mixed.iter() {
                for j in 0..BLOCK {
                    acc[j] = acc[j].min(ak[j].wrapping_mul(h).wrapping_add(bk[j]));
                }
            }
            s.copy_from_slice(&acc);
        }
        for k in sig.len() - sig.len() % BLOCK..sig.len() {
            for &h in mixed.iter() {
                sig[k] = sig[k].min(a[k].wrapping_mul(h).wrapping_add(b[k]));
            }
        }
    }
}

/// Folds token hashes into a legacy signature. The 64-bit wrap-around before `mod p` is
/// datasketch's (numpy uint64) arithmetic and part of the spec. On x86-64 with AVX2 (picked at
/// run time), 8 lanes at a time.
pub fn fold_legacy(a: &[u64], b: &[u64], hashes: &[u32], sig: &mut [u64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { avx2::fold_legacy(a, b, hashes, sig) };
    }
    fold_legacy_scalar(a, b, hashes, sig)
}

/// [`fold_legacy`], one lane at a time.
fn fold_legacy_scalar(a: &[u64], b: &[u64], hashes: &[u32], sig: &mut [u64]) {
    for &h in hashes {
        let h = u64::from(h);
        for ((s, &ak), &bk) in sig.iter_mut().zip(a).zip(b) {
            let x = ak.wrapping_mul(h).wrapping_add(bk);
            *s = (*s).min((x % MERSENNE_61) & 0xFFFF_FFFF);
        }
    }
}

/// A signature row under construction, typed by scheme.
pub enum SignatureMut<'a> {
    Affine32(&'a mut [u32]),
    Legacy(&'a mut [u64]),
}

impl Permutations {
    /// Resets `sig` to the empty-set value (all lanes 2^32 - 1, as datasketch initialises).
    pub fn clear(sig: &mut SignatureMut<'_>) {
        match sig {
            SignatureMut::Affine32(s) => s.fill(u32::MAX),
            SignatureMut::Legacy(s) => s.fill(u64::from(u32::MAX)),
        }
    }

    /// Folds the tokens with 32-bit hashes `hashes` into `sig`.
    pub fn fold(&self, hashes: &[u32], sig: &mut SignatureMut<'_>) {
        match (self, sig) {
            (Self::Affine32 { a, b }, SignatureMut::Affine32(s)) => fold_affine32(a, b, hashes, s),
            (Self::Legacy { a, b }, SignatureMut::Legacy(s)) => fold_legacy(a, b, hashes, s),
            _ => unreachable!("signature buffer does not match the permutation scheme"),
        }
    }
}

/// Memo of token hashes for one block of texts: observation shingles repeat heavily across a batch,
/// and a table probe costs a fraction of a SHA-1. Tokens up to 32 bytes (word 3-grams of
/// observations) are memoised, longer ones always hashed.
pub struct TokenHashCache(DirectMapped<TokenKey, u32>);

/// A memoised token: its bytes zero-padded to 32, as four words, and its length.
#[derive(Clone, Copy, Debug)]
struct TokenKey {
    words: [u64; 4],
    len: u8,
}

impl PartialEq for TokenKey {
    /// Word by word: the key is built in registers, and a vectorised compare would first spill it
    /// to the stack with 8-byte stores and reload it with 16-byte loads, which stall.
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        let [a0, a1, a2, a3] = self.words;
        let [b0, b1, b2, b3] = other.words;
        ((a0 ^ b0) | (a1 ^ b1) | (a2 ^ b2) | (a3 ^ b3)) == 0 && self.len == other.len
    }
}

impl Eq for TokenKey {}

impl TokenHashCache {
    /// A memo sized for a block of `rows` texts (40-byte slots).
    pub fn for_rows(rows: usize) -> Self {
        // Length 255 marks vacant slots: memoised tokens are at most 32 bytes.
        // ~50 word 3-grams per observation.
        Self(DirectMapped::new(
            bits_for_rows(rows, 32),
            TokenKey {
                words: [0; 4],
                len: u8::MAX,
            },
        ))
    }

    #[inline]
    pub fn hash(&mut self, token: &[u8]) -> u32 {
        if token.len() > 32 {
            return sha1_hash32(token);
        }
        // The token zero-padded to 32 bytes, as four words (compared as words, not bytes).
        let words = padded_words(token);
        // Slot index: a multiplicative mix of the four words and the length.
        let folded = words[0]
            ^ words[1].rotate_left(16)
            ^ words[2].rotate_left(32)
            ^ words[3].rotate_left(48);
        let index = (folded ^ token.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        self.0.get_or_compute(
            TokenKey {
                words,
                len: token.len() as u8,
            },
            index,
            || sha1_hash32(token),
        )
    }
}

/// `token` (at most 32 bytes) zero-padded to 32 bytes, as four little-endian words read straight
/// from the slice: copying a variable number of bytes into a stack buffer and reading it back as
/// words stalls on store-to-load forwarding, which cost as much as the rest of the memo probe.
#[inline(always)]
fn padded_words(token: &[u8]) -> [u64; 4] {
    debug_assert!(token.len() <= 32);
    let mut words = [0u64; 4];
    let full = token.len() / 8;
    for (k, word) in words.iter_mut().enumerate().take(full) {
        *word = u64::from_le_bytes(token[8 * k..8 * k + 8].try_into().expect("8 bytes"));
    }
    let tail = &token[8 * full..];
    if !tail.is_empty() {
        words[full] = tail_word(tail);
    }
    words
}

/// The 1 to 7 bytes of `tail` as a zero-extended little-endian word, from (possibly overlapping)
/// loads that cover every byte: overlapping bytes land on the same bits, so OR-ing them is exact.
#[inline(always)]
fn tail_word(tail: &[u8]) -> u64 {
    let n = tail.len();
    if n >= 4 {
        let low = u64::from(u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")));
        let high = u64::from(u32::from_le_bytes(
            tail[n - 4..].try_into().expect("4 bytes"),
        ));
        low | (high << (8 * (n - 4)))
    } else {
        let byte = |i: usize| u64::from(tail[i]) << (8 * i);
        byte(0) | byte(n / 2) | byte(n - 1)
    }
}

/// Signatures of a batch: `[n, num_perm]` lanes, row-major, in datasketch's dtype for the
/// scheme (uint32 for affine32, uint64 for legacy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signatures {
    Affine32(Vec<u32>),
    Legacy(Vec<u64>),
}

/// Per-block state of a signature batch: token-hash memo, the row's hashes, shingling buffers.
pub struct RowState {
    pub cache: TokenHashCache,
    pub hashes: Vec<u32>,
    pub scratch: Scratch,
}

impl RowState {
    fn for_rows(rows: usize) -> Self {
        Self {
            cache: TokenHashCache::for_rows(rows),
            hashes: Vec::new(),
            scratch: Scratch::default(),
        }
    }
}

/// Fills the signatures of rows `0..n` in parallel on `pool`: `hash_row(i, state)` pushes the
/// token hashes of row `i` onto `state.hashes`. Rows go out in blocks that share one [`RowState`].
pub fn signatures(
    perms: &Permutations,
    n: usize,
    pool: &Pool,
    hash_row: impl Fn(usize, &mut RowState) + Sync,
) -> Signatures {
    let fill = |row: &mut SignatureMut<'_>, i: usize, state: &mut RowState| {
        state.hashes.clear();
        hash_row(i, state);
        Permutations::clear(row);
        perms.fold(&state.hashes, row);
    };
    match perms {
        Permutations::Affine32 { a, .. } => {
            Signatures::Affine32(lanes(n, a.len(), pool, |row, i, s| {
                fill(&mut SignatureMut::Affine32(row), i, s)
            }))
        }
        Permutations::Legacy { a, .. } => {
            Signatures::Legacy(lanes(n, a.len(), pool, |row, i, s| {
                fill(&mut SignatureMut::Legacy(row), i, s)
            }))
        }
    }
}

/// `n` rows of `m` lanes of type `T`, filled in place and in parallel by `fill_row(row, i, state)`,
/// rows handed out in blocks that share one [`RowState`].
fn lanes<T: Copy + Default + Send>(
    n: usize,
    m: usize,
    pool: &Pool,
    fill_row: impl Fn(&mut [T], usize, &mut RowState) + Sync,
) -> Vec<T> {
    let mut out = vec![T::default(); n * m];
    if out.is_empty() {
        return out;
    }
    pool.install(|| {
        let block = memo_block(n);
        out.par_chunks_mut(m * block)
            .enumerate()
            .for_each(|(b, rows)| {
                let mut state = RowState::for_rows(rows.len() / m);
                for (j, row) in rows.chunks_mut(m).enumerate() {
                    fill_row(row, b * block + j, &mut state);
                }
            })
    });
    out
}

/// Signatures of token lists (each token hashed as its bytes), as datasketch's `update_batch`.
pub fn signatures_of_tokens<T: AsRef<[u8]> + Sync>(
    token_lists: &[Vec<T>],
    perms: &Permutations,
    pool: &Pool,
) -> Signatures {
    signatures(perms, token_lists.len(), pool, |i, state| {
        let RowState { cache, hashes, .. } = state;
        hashes.extend(token_lists[i].iter().map(|t| cache.hash(t.as_ref())))
    })
}

/// Signatures of texts cut into shingles by `shingling` (after `str.lower`-like lowercasing
/// when `lowercase`).
pub fn signatures_of_texts<S: AsRef<str> + Sync>(
    texts: &[S],
    perms: &Permutations,
    shingling: Shingling,
    lowercase: bool,
    pool: &Pool,
) -> Signatures {
    signatures(perms, texts.len(), pool, |i, state| {
        let RowState {
            cache,
            hashes,
            scratch,
        } = state;
        let text = prepare(texts[i].as_ref(), lowercase);
        for_each_shingle(&text, shingling, scratch, |s| hashes.push(cache.hash(s)));
    })
}

/// `text`, lowercased when `lowercase` (the shingles of `minhash_texts(..., lowercase=True)`).
pub fn prepare(text: &str, lowercase: bool) -> Cow<'_, str> {
    if lowercase {
        text.to_lowercase().into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_words_equal_a_zero_padded_copy() {
        let bytes: Vec<u8> = (1..=32).collect();
        for len in 0..=32 {
            let mut padded = [0u8; 32];
            padded[..len].copy_from_slice(&bytes[..len]);
            let expect: [u64; 4] = bytemuck::cast(padded);
            assert_eq!(padded_words(&bytes[..len]), expect, "length {len}");
        }
    }

    #[test]
    fn sha1_hash32_matches_datasketch() {
        // struct.unpack("<I", hashlib.sha1(b"hello").digest()[:4])[0]
        assert_eq!(sha1_hash32(b"hello"), 0x1DC6_F4AA);
        // SHA-1("") = da39a3ee...
        assert_eq!(sha1_hash32(b""), 0xEEA3_39DA);
    }

    #[test]
    fn one_block_sha1_equals_the_digest() {
        let bytes: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8).collect();
        for len in 0..bytes.len() {
            let digest = Sha1::digest(&bytes[..len]);
            let expect = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
            assert_eq!(sha1_hash32(&bytes[..len]), expect, "length {len}");
        }
    }

    #[test]
    fn first_lane_at_seed_1() {
        // datasketch MinHash(num_perm=1, seed=1, scheme=...) after update(b"hello"); the
        // parameters are its `permutations[:, 0]`.
        let affine = Permutations::Affine32 {
            a: vec![3_582_191_691],
            b: vec![4_282_876_139],
        };
        let mut lane = [0u32; 1];
        let mut sig = SignatureMut::Affine32(&mut lane);
        Permutations::clear(&mut sig);
        affine.fold(&[sha1_hash32(b"hello")], &mut sig);
        assert_eq!(lane[0], 613_208_135);

        let legacy = Permutations::Legacy {
            a: vec![775_169_054_918_279_404],
            b: vec![1_758_426_461_858_698_312],
        };
        let mut lane = [0u64; 1];
        let mut sig = SignatureMut::Legacy(&mut lane);
        Permutations::clear(&mut sig);
        legacy.fold(&[sha1_hash32(b"hello")], &mut sig);
        assert_eq!(lane[0], 228_630_785);
    }

    #[test]
    fn vector_legacy_fold_equals_lane_by_lane() {
        // 77 lanes (passes of 8 and a tail); parameters up to 2^64 − 1 and hashes at the extremes.
        let mut a: Vec<u64> = (0..77u64)
            .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
            .collect();
        (a[3], a[76]) = (u64::MAX, u64::MAX);
        let b: Vec<u64> = (0..77u64)
            .map(|k| k.wrapping_mul(0xD1B5_4A32_D192_ED03))
            .collect();
        let hashes = [0u32, 1, 99, 0x7FFF_FFFF, 0xFFFF_FFFF, 12_345];
        let mut fast = vec![u64::from(u32::MAX); 77];
        let mut slow = fast.clone();
        fold_legacy(&a, &b, &hashes, &mut fast);
        fold_legacy_scalar(&a, &b, &hashes, &mut slow);
        assert_eq!(fast, slow);
    }

    #[test]
    fn blocked_fold_equals_lane_by_lane() {
        // 77 lanes: two 32-lane passes, a block of 8 and a tail, against the definition lane by lane.
        let a: Vec<u32> = (0..77u32)
            .map(|k| k.wrapping_mul(2_654_435_761) | 1)
            .collect();
        let b: Vec<u32> = (0..77u32)
            .map(|k| k.wrapping_mul(40_503).wrapping_add(7))
            .collect();
        let hashes = [1u32, 99, 0xFFFF_FFFF, 12_345];
        let mut lanes = [u32::MAX; 77];
        fold_affine32(&a, &b, &hashes, &mut lanes);
        for k in 0..77 {
            let expect = hashes
                .iter()
                .map(|&h| a[k].wrapping_mul(fmix32(h)).wrapping_add(b[k]))
                .min()
                .unwrap();
            assert_eq!(lanes[k], expect);
        }
        let mut cache = TokenHashCache::for_rows(1);
        assert_eq!(cache.hash(b"hello"), sha1_hash32(b"hello"));
        assert_eq!(cache.hash(b"hello"), sha1_hash32(b"hello"));
    }

    #[test]
    fn empty_signature_is_max() {
        let mut lanes = [0u32; 4];
        let mut sig = SignatureMut::Affine32(&mut lanes);
        Permutations::clear(&mut sig);
        assert_eq!(lanes, [u32::MAX; 4]);
    }

    #[test]
    fn batches_equal_row_by_row() {
        // 3,000 rows on two threads: several blocks, each with its own memo.
        let texts: Vec<String> = (0..3000)
            .map(|i| format!("you see a cabinet {} and a drawer {}", i % 7, i % 11))
            .collect();
        let a: Vec<u64> = (0..16u64).map(|k| (k * 2_654_435_761) | 1).collect();
        let b: Vec<u64> = (0..16u64).map(|k| k * 40_503).collect();
        let shingling = Shingling::WordNgrams(3);
        for scheme in [Scheme::Affine32, Scheme::Legacy] {
            let perms = Permutations::new(scheme, &a, &b);
            let batch = signatures_of_texts(
                &texts,
                &perms,
                shingling,
                true,
                &Pool::with_threads(2).unwrap(),
            );
            let tokens: Vec<Vec<String>> = texts
                .iter()
                .map(|t| crate::shingle::shingles(&t.to_lowercase(), shingling))
                .collect();
            assert_eq!(
                signatures_of_tokens(&tokens, &perms, &Pool::with_threads(1).unwrap()),
                batch
            );
            let one = |i: usize| {
                let hashes: Vec<u32> = tokens[i]
                    .iter()
                    .map(|t| sha1_hash32(t.as_bytes()))
                    .collect();
                match &perms {
                    Permutations::Affine32 { .. } => {
                        let mut lanes = vec![0u32; 16];
                        let mut sig = SignatureMut::Affine32(&mut lanes);
                        Permutations::clear(&mut sig);
                        perms.fold(&hashes, &mut sig);
                        Signatures::Affine32(lanes)
                    }
                    Permutations::Legacy { .. } => {
                        let mut lanes = vec![0u64; 16];
                        let mut sig = SignatureMut::Legacy(&mut lanes);
                        Permutations::clear(&mut sig);
                        perms.fold(&hashes, &mut sig);
                        Signatures::Legacy(lanes)
                    }
                }
            };
            for i in [0, 1023, 1024, 2999] {
                let expect = one(i);
                match (&batch, expect) {
                    (Signatures::Affine32(all), Signatures::Affine32(row)) => {
                        assert_eq!(all[16 * i..16 * (i + 1)], row)
                    }
                    (Signatures::Legacy(all), Signatures::Legacy(row)) => {
                        assert_eq!(all[16 * i..16 * (i + 1)], row)
                    }
                    _ => panic!("dtype follows the scheme"),
                }
            }
        }
        assert!(Scheme::from_name("affine64").is_err());
    }
}
