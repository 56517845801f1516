//! Exact state keys: XXH3 (64- or 128-bit) of the bytes that define a state.
//!
//! XXH3 runs at memory speed on short inputs, which is what lets every observation be keyed as it
//! is produced. Keys are fingerprints, not identities: two different states collide with
//! probability about n^2 / 2^65 for 64-bit keys, so use 128-bit keys where that matters.

use crate::parallel::{map_prefetched, Pool};
use crate::Error;
use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64_with_seed, Xxh3};

/// 64-bit key of a byte string.
#[inline]
pub fn key64(data: &[u8], seed: u64) -> u64 {
    xxh3_64_with_seed(data, seed)
}

/// 128-bit key of a byte string.
#[inline]
pub fn key128(data: &[u8], seed: u64) -> u128 {
    xxh3_128_with_seed(data, seed)
}

/// Streaming hasher for a header-tagged value (an array: dtype and shape, then its bytes).
///
/// The header is length-prefixed, so (header, data) pairs cannot run into each other: arrays that
/// share bytes but differ in shape or dtype get different keys.
fn tagged(header: &[u8], data: &[u8], seed: u64) -> Xxh3 {
    let mut hasher = Xxh3::with_seed(seed);
    hasher.update(&(header.len() as u64).to_le_bytes());
    hasher.update(header);
    hasher.update(data);
    hasher
}

/// 64-bit key of a header-tagged value.
pub fn tagged_key64(header: &[u8], data: &[u8], seed: u64) -> u64 {
    tagged(header, data, seed).digest()
}

/// 128-bit key of a header-tagged value.
pub fn tagged_key128(header: &[u8], data: &[u8], seed: u64) -> u128 {
    tagged(header, data, seed).digest128()
}

/// Splits a 128-bit key into the (low, high) 64-bit words stored in a `[n, 2]` key array.
#[inline]
pub fn split128(key: u128) -> [u64; 2] {
    [key as u64, (key >> 64) as u64]
}

/// Key width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// One u64 word per key.
    Bits64,
    /// Two u64 words per key, low word first.
    Bits128,
}

impl Width {
    /// The width of `bits` (64 or 128).
    pub fn from_bits(bits: u32) -> Result<Self, Error> {
        match bits {
            64 => Ok(Self::Bits64),
            128 => Ok(Self::Bits128),
            _ => Err(Error::Unknown {
                param: "bits",
                got: bits.to_string(),
                expected: "64 or 128",
            }),
        }
    }

    /// u64 words per key.
    pub fn words(self) -> usize {
        match self {
            Self::Bits64 => 1,
            Self::Bits128 => 2,
        }
    }
}

/// A value that has a key: a byte string (`str`, `bytes`) or a header-tagged buffer ([`Tagged`]).
pub trait Keyed: Sync {
    /// The bytes worth prefetching before the key is computed.
    fn data(&self) -> &[u8];
    fn key64(&self, seed: u64) -> u64;
    fn key128(&self, seed: u64) -> u128;
}

impl<T: AsRef<[u8]> + Sync> Keyed for T {
    fn data(&self) -> &[u8] {
        self.as_ref()
    }
    fn key64(&self, seed: u64) -> u64 {
        key64(self.as_ref(), seed)
    }
    fn key128(&self, seed: u64) -> u128 {
        key128(self.as_ref(), seed)
    }
}

/// A header-tagged value: an array's dtype-and-shape header and its bytes.
pub struct Tagged<'a> {
    pub header: &'a [u8],
    pub data: &'a [u8],
}

impl Keyed for Tagged<'_> {
    fn data(&self) -> &[u8] {
        self.data
    }
    fn key64(&self, seed: u64) -> u64 {
        tagged_key64(self.header, self.data, seed)
    }
    fn key128(&self, seed: u64) -> u128 {
        tagged_key128(self.header, self.data, seed)
    }
}

/// Keys of a batch, in parallel on `pool`: `width.words()` u64 words per item, row-major (an
/// `[n]` or `[n, 2]` array).
pub fn batch<T: Keyed>(items: &[T], width: Width, seed: u64, pool: &Pool) -> Vec<u64> {
    pool.install(|| match width {
        Width::Bits64 => map_prefetched(items, |t| t.data(), |t| t.key64(seed)),
        Width::Bits128 => {
            map_prefetched(items, |t| t.data(), |t| split128(t.key128(seed))).into_flattened()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh3_known_values() {
        // Reference values of XXH3 for the empty input at seed 0 (xxHash test vectors).
        assert_eq!(key64(b"", 0), 0x2D06_8005_38D3_94C2);
        assert_eq!(key128(b"", 0), 0x99AA_06D3_0147_98D8_6001_C324_468D_497F);
    }

    #[test]
    fn seed_and_tag_change_keys() {
        assert_ne!(key64(b"abc", 0), key64(b"abc", 1));
        assert_ne!(tagged_key64(b"<u1|(3,)", b"abc", 0), key64(b"abc", 0));
        assert_ne!(
            tagged_key64(b"<u1|(3,)", b"abc", 0),
            tagged_key64(b"<u1|(1, 3)", b"abc", 0)
        );
        assert_eq!(tagged_key64(b"h", b"abc", 7), tagged_key64(b"h", b"abc", 7));
        let k = tagged_key128(b"h", b"abc", 7);
        assert_eq!(split128(k), [k as u64, (k >> 64) as u64]);
    }

    #[test]
    fn batches_equal_single_keys() {
        let texts: Vec<String> = (0..3000).map(|i| format!("text {i}")).collect();
        let pool = Pool::with_threads(2).unwrap();
        let k64 = batch(&texts, Width::Bits64, 5, &pool);
        let k128 = batch(&texts, Width::Bits128, 5, &pool);
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(k64[i], key64(t.as_bytes(), 5));
            assert_eq!(k128[2 * i..2 * i + 2], split128(key128(t.as_bytes(), 5)));
        }
        let tagged = [Tagged {
            header: b"h",
            data: b"abc",
        }];
        assert_eq!(
            batch(&tagged, Width::Bits64, 7, &Pool::default()),
            [tagged_key64(b"h", b"abc", 7)]
        );
        assert_eq!(Width::from_bits(128), Ok(Width::Bits128));
        assert!(Width::from_bits(32).is_err());
    }
}
