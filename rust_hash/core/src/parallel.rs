//! Where batches run: thread pools by size, rows per task, and prefetching of scattered items.
//!
//! Every batch driver of the crate takes a [`Pool`] and runs its parallel work inside it; the
//! caller (the bindings) decides what to release around the call (the GIL).

use crate::Error;
use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Rows handed to one rayon task: enough work to amortise scheduling on ~300-byte texts.
pub const MIN_ROWS_PER_TASK: usize = 1024;

/// How many items ahead batch loops prefetch: enough in-flight cache misses to cover memory latency.
pub const PREFETCH_AHEAD: usize = 8;

/// The threads a batch runs on: rayon's global pool (RAYON_NUM_THREADS or all cores), or a pool
/// of a fixed size, built on first use and kept for the life of the process.
#[derive(Clone, Default)]
pub struct Pool(Option<Arc<ThreadPool>>);

impl Pool {
    /// The pool of `num_threads` threads; 0 means rayon's global pool.
    pub fn with_threads(num_threads: usize) -> Result<Self, Error> {
        if num_threads == 0 {
            return Ok(Self(None));
        }
        static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
        let mut pools = POOLS
            .get_or_init(Default::default)
            .lock()
            .expect("pool registry poisoned");
        if let Some(p) = pools.get(&num_threads) {
            return Ok(Self(Some(p.clone())));
        }
        let p = Arc::new(
            ThreadPoolBuilder::new()
                .num_threads(num_threads)
                .build()
                .map_err(|e| Error::ThreadPool(e.to_string()))?,
        );
        pools.insert(num_threads, p.clone());
        Ok(Self(Some(p)))
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
