//! A direct-mapped memo: a fixed table where each key has one slot and the newest entry wins.
//!
//! Used to skip repeated SHA-1 / MD5 calls on shingles that recur across a batch (observation
//! vocabularies are small). Unlike a growing hash map it never allocates after construction and
//! costs one probe on a miss, so high-entropy input that never repeats is not slowed down.

/// Table size (log2 of slots) for a block of `rows` texts of about `per_row` distinct keys
/// each, from 2^10 to 2^15: small batches (one environment step) pay for a small table only,
/// large ones get a table that holds an observation vocabulary.
pub fn bits_for_rows(rows: usize, per_row: usize) -> u32 {
    (rows.max(1) * per_row)
        .next_power_of_two()
        .trailing_zeros()
        .clamp(10, 15)
}

/// Memo of `V` by exact key `K`, with `2^bits` slots.
pub struct DirectMapped<K, V> {
    slots: Vec<(K, V)>,
    mask: usize,
}

impl<K: Copy + Eq, V: Copy + Default> DirectMapped<K, V> {
    /// `vacant` marks empty slots and must never be looked up (callers pick a key that cannot
    /// occur, e.g. bytes 0xFF, which never appear in UTF-8). No `Option`: slots stay 16 bytes.
    pub fn new(bits: u32, vacant: K) -> Self {
        Self {
            slots: vec![(vacant, V::default()); 1 << bits],
            mask: (1 << bits) - 1,
        }
    }

    /// The value for `key`, computed by `compute` unless the slot `index_hash` picks holds it.
    #[inline(always)]
    pub fn get_or_compute(&mut self, key: K, index_hash: u64, compute: impl FnOnce() -> V) -> V {
        let slot = &mut self.slots[index_hash as usize & self.mask];
        if slot.0 != key {
            *slot = (key, compute());
        }
        slot.1
    }
}

#[cfg(test)]
mod tests {
    use super::DirectMapped;

    #[test]
    fn table_sizes() {
        assert_eq!(super::bits_for_rows(0, 32), 10);
        assert_eq!(super::bits_for_rows(100, 32), 12);
        assert_eq!(super::bits_for_rows(1 << 20, 32), 15);
    }

    #[test]
    fn hits_misses_and_eviction() {
        let mut memo = DirectMapped::new(1, u32::MAX);
        let mut calls = 0;
        let mut get = |memo: &mut DirectMapped<u32, u32>, k: u32| {
            memo.get_or_compute(k, u64::from(k), || {
                calls += 1;
                k * 10
            })
        };
        assert_eq!(get(&mut memo, 3), 30);
        assert_eq!(get(&mut memo, 3), 30);
        assert_eq!(get(&mut memo, 5), 50); // same slot as 3: evicts it
        assert_eq!(get(&mut memo, 3), 30);
        assert_eq!(get(&mut memo, 0), 0); // slot 0 starts vacant, not "holding key 0"
        assert_eq!(calls, 4);
    }
}
