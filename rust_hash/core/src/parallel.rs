//! Where batches run: thread pools by size, rows per task, and prefetching of scattered items.
//!
//! Every batch driver of the crate takes a [`Pool`] and runs its parallel work inside it; the
//! caller (the bindings) decides what to release around the call (the GIL).

use crate::Error;
use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::sync::{Arc, Mutex};

/// Rows handed to one rayon task: enough work to amortise scheduling on ~300-byte texts.
pub const MIN_ROWS_PER_TASK: usize = 1024;

/// How many items ahead batch loops prefetch: enough in-flight cache misses to cover memory latency.
pub const PREFETCH_AHEAD: usize = 8;

/// The threads a batch runs on: rayon's global pool (RAYON_NUM_THREADS or all cores), or a shared
/// pool of a fixed size from a small cache ([`POOL_CACHE_SIZES`] sizes, least recently used dropped).
#[derive(Clone, Default)]
pub struct Pool(Option<Arc<ThreadPool>>);

/// How many pool sizes are kept alive at once. A process uses one or two sizes in practice; the
/// bound keeps the threads alive at most this many pools' worth, however many sizes are asked for
/// (`pyagentrl.hashing` caps a size at 4 x the cores). A dropped pool's threads exit once the calls
/// still running on it end; asking for its size again builds a new one.
pub const POOL_CACHE_SIZES: usize = 4;

/// Pools by size, most recently used last; at most `capacity` of them.
struct PoolCache {
    capacity: usize,
    pools: Vec<(usize, Arc<ThreadPool>)>,
    built: usize,
}

impl PoolCache {
    const fn new(capacity: usize) -> Self {
        Self {
            capacity,
            pools: Vec::new(),
            built: 0,
        }
    }

    /// The pool of `num_threads` (>= 1) threads: the cached one, or a new one that evicts the
    /// least recently used size when the cache is full.
    fn get(&mut self, num_threads: usize) -> Result<Arc<ThreadPool>, Error> {
        if let Some(i) = self.pools.iter().position(|(size, _)| *size == num_threads) {
            let entry = self.pools.remove(i);
            let pool = entry.1.clone();
            self.pools.push(entry);
            return Ok(pool);
        }
        let pool = Arc::new(
            ThreadPoolBuilder::new()
                .num_threads(num_threads)
                .build()
                .map_err(|e| Error::ThreadPool(e.to_string()))?,
        );
        self.built += 1;
        if self.pools.len() == self.capacity {
            self.pools.remove(0);
        }
        self.pools.push((num_threads, pool.clone()));
        Ok(pool)
    }
}

/// The process's pool cache, shared by every call.
static POOLS: Mutex<PoolCache> = Mutex::new(PoolCache::new(POOL_CACHE_SIZES));

impl Pool {
    /// The pool of `num_threads` threads; 0 means rayon's global pool.
    pub fn with_threads(num_threads: usize) -> Result<Self, Error> {
        if num_threads == 0 {
            return Ok(Self(None));
        }
        let pool = POOLS
            .lock()
            .expect("pool cache poisoned")
            .get(num_threads)?;
        Ok(Self(Some(pool)))
    }

    /// Runs `f` with this pool's threads serving its parallel iterators.
    pub fn install<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match &self.0 {
            Some(p) => p.install(f),
            None => f(),
        }
    }
}

/// Rows per block for work that carries a memo: a few blocks per thread, so each memo is
/// built (allocated and warmed) a few times per call rather than once per small task, while
/// a thread slowed by other load can still be helped; one block on one thread, where there is
/// nobody to help. Call inside the pool.
pub fn memo_block(n: usize) -> usize {
    let threads = rayon::current_num_threads();
    if threads == 1 {
        return n.max(1);
    }
    n.div_ceil(4 * threads).max(MIN_ROWS_PER_TASK.min(n)).max(1)
}

/// Asks the CPU to load the cache lines of `bytes` (at most the first 512): a batch's items are
/// Python objects scattered over the heap, and waiting on their cache misses one at a time costs
/// more than hashing a ~300-byte text.
#[inline(always)]
pub fn prefetch(bytes: &[u8]) {
    prefetch_lines(bytes.as_ptr(), bytes.len().min(512));
}

/// Prefetches the cache lines of the `len` bytes from `start`. Only addresses are computed (with
/// wrapping arithmetic) and a prefetch never faults, so `start` need not point into `len` valid bytes.
#[inline(always)]
pub fn prefetch_lines(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..len).step_by(64) {
        // SAFETY: a prefetch is a hint: it dereferences nothing and cannot fault.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

/// `f` of every item, in order, in parallel (call inside the pool); each task prefetches the
/// bytes of the items just ahead.
pub fn map_prefetched<S: Sync, T: Send>(
    items: &[S],
    bytes: impl Fn(&S) -> &[u8] + Sync,
    f: impl Fn(&S) -> T + Sync,
) -> Vec<T> {
    items
        .par_chunks(MIN_ROWS_PER_TASK)
        .flat_map_iter(|chunk| {
            chunk.iter().enumerate().map(|(i, item)| {
                if let Some(ahead) = chunk.get(i + PREFETCH_AHEAD) {
                    prefetch(bytes(ahead));
                }
                f(item)
            })
        })
        .collect()
}

/// `f` of every block of `items` (blocks of [`memo_block`] rows; `f` gets the block's first row
/// and its rows), in parallel on `pool`, in block order. A block is where a memo lives.
pub fn map_blocks<S: Sync, R: Send>(
    pool: &Pool,
    items: &[S],
    f: impl Fn(usize, &[S]) -> R + Sync,
) -> Vec<R> {
    pool.install(|| {
        let block = memo_block(items.len());
        items
            .par_chunks(block)
            .enumerate()
            .map(|(b, rows)| f(b * block, rows))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_are_kept_by_size() {
        let a = Pool::with_threads(2).expect("two threads");
        let b = Pool::with_threads(2).expect("two threads");
        assert!(Arc::ptr_eq(a.0.as_ref().unwrap(), b.0.as_ref().unwrap()));
        assert_eq!(a.install(rayon::current_num_threads), 2);
        assert!(Pool::with_threads(0).expect("global").0.is_none());
    }

    #[test]
    fn the_cache_reuses_a_size_and_keeps_at_most_its_capacity() {
        let mut cache = PoolCache::new(3);
        let two = cache.get(2).unwrap();
        assert!(
            Arc::ptr_eq(&two, &cache.get(2).unwrap()),
            "the same size, the same pool"
        );
        assert_eq!(cache.built, 1);
        // Many distinct sizes, round after round: the cache never holds more than 3 pools, and sizes
        // that stay within the capacity are built once however often they are asked for.
        for _ in 0..5 {
            for size in 1..=8 {
                cache.get(size).unwrap();
                assert!(cache.pools.len() <= 3);
            }
        }
        let built = cache.built;
        for _ in 0..10 {
            for size in [1, 2, 3] {
                cache.get(size).unwrap();
            }
        }
        assert_eq!(
            cache.built,
            built + 3,
            "three sizes within the capacity: built once each"
        );
        assert_eq!(cache.pools.len(), 3);
    }

    #[test]
    fn the_least_recently_used_size_is_dropped() {
        let mut cache = PoolCache::new(2);
        let one = cache.get(1).unwrap();
        cache.get(2).unwrap();
        cache.get(1).unwrap(); // 1 is now the most recent: 3 evicts 2
        cache.get(3).unwrap();
        let sizes: Vec<usize> = cache.pools.iter().map(|(size, _)| *size).collect();
        assert_eq!(sizes, vec![1, 3]);
        assert!(Arc::ptr_eq(&one, &cache.get(1).unwrap()));
        // A dropped pool lives on while a caller holds it: eviction never pulls a pool from under a call.
        let three = cache.get(3).unwrap();
        cache.get(4).unwrap();
        cache.get(5).unwrap();
        assert_eq!(three.install(rayon::current_num_threads), 3);
    }

    #[test]
    fn block_sizes() {
        let one = Pool::with_threads(1).unwrap();
        assert_eq!(one.install(|| memo_block(5000)), 5000);
        assert_eq!(one.install(|| memo_block(0)), 1);
        let two = Pool::with_threads(2).unwrap();
        // Small batches stay in one task; large ones get four blocks per thread.
        assert_eq!(two.install(|| memo_block(100)), 100);
        assert_eq!(two.install(|| memo_block(3000)), 1024);
        assert_eq!(two.install(|| memo_block(80_000)), 10_000);
    }

    #[test]
    fn maps_keep_order() {
        let items: Vec<u32> = (0..5000).collect();
        let pool = Pool::with_threads(2).unwrap();
        let doubled = pool.install(|| map_prefetched(&items, bytemuck::bytes_of, |x| 2 * x));
        assert_eq!(doubled, items.iter().map(|x| 2 * x).collect::<Vec<_>>());
        let blocks = map_blocks(&pool, &items, |start, rows| (start, rows.len()));
        assert!(
            blocks.len() > 1,
            "5,000 rows on two threads make several blocks"
        );
        let mut next = 0;
        for (start, len) in blocks {
            assert_eq!(start, next);
            next += len;
        }
        assert_eq!(next, items.len());
    }
}
