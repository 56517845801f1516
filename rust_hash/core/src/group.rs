//! Dense anchor ids: rows of one task group that share a state get one id.
//!
//! Every task group is clustered on its own (in parallel), so groups never cross task groups.
//! Near-duplicate grouping is *connected components* of the graph whose edges are confirmed
//! candidate pairs (LSH band or SimHash block match, then similarity test). Components, unlike
//! representative-based clustering, depend only on the set of rows and not on their order:
//! the edge set is a symmetric function of pairs. The cost is chaining (a ~ b ~ c puts a and c
//! together even when a and c are far apart), which the caller bounds with a strict threshold.
//! Ids are numbered by first appearance in row order, so shuffling rows permutes ids only.

use crate::fingerprint::hamming;
use crate::parallel::Pool;
use crate::unionfind::UnionFind;
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::hash::Hash;
use xxhash_rust::xxh3::xxh3_64;

/// Clusters the rows of one task group: `rows` are global row indices in increasing order; the
/// result gives each of them a local label numbered by first appearance.
pub trait Cluster: Sync {
    fn cluster(&self, rows: &[u32]) -> Vec<u32>;
}

/// Global dense ids from per-task-group clusterings.
pub fn assign(group_ids: &[i64], clusterer: &impl Cluster) -> Vec<i64> {
    let mut index: FxHashMap<i64, usize> = FxHashMap::default();
    let mut members: Vec<Vec<u32>> = Vec::new();
    let mut group_of_row = Vec::with_capacity(group_ids.len());
    for (row, g) in group_ids.iter().enumerate() {
        let gi = *index.entry(*g).or_insert_with(|| {
            members.push(Vec::new());
            members.len() - 1
        });
        members[gi].push(row as u32);
        group_of_row.push(gi as u32);
    }
    let locals: Vec<Vec<u32>> = members
        .par_iter()
        .map(|rows| clusterer.cluster(rows))
        .collect();

    // Renumber (task group, local label) pairs by first appearance in row order.
    let mut global: Vec<Vec<i64>> = locals
        .iter()
        .map(|l| vec![-1; l.iter().max().map_or(0, |m| *m as usize + 1)])
        .collect();
    let mut cursor = vec![0usize; members.len()];
    let mut next = 0i64;
    group_of_row
        .iter()
        .map(|&gi| {
            let gi = gi as usize;
            let local = locals[gi][cursor[gi]] as usize;
            cursor[gi] += 1;
            let id = &mut global[gi][local];
            if *id < 0 {
                *id = next;
                next += 1;
            }
            *id
        })
        .collect()
}

/// Anchor ids of rows with equal keys (`width` u64 words per row) within each task group.
///
/// # Panics
/// Unless `keys` holds `width` words per row.
pub fn by_keys(group_ids: &[i64], keys: &[u64], width: usize, pool: &Pool) -> Vec<i64> {
    assert_eq!(
        keys.len(),
        group_ids.len() * width,
        "width key words per row"
    );
    pool.install(|| assign(group_ids, &Exact { keys, width }))
}

/// Anchor ids of MinHash-LSH components within each task group: rows sharing one of `bands`
/// bands of `rows_per_band` lanes with estimated Jaccard >= `threshold`, chained.
///
/// # Panics
/// Unless `signatures` holds `group_ids.len()` rows of `num_perm` lanes and
/// `1 <= bands * rows_per_band <= num_perm`.
pub fn by_signatures<T: bytemuck::Pod + Eq + Hash + Sync>(
    group_ids: &[i64],
    signatures: &[T],
    num_perm: usize,
    (bands, rows_per_band): (usize, usize),
    threshold: f64,
    pool: &Pool,
) -> Vec<i64> {
    assert!(
        (1..=num_perm).contains(&(bands * rows_per_band))
            && signatures.len() == group_ids.len() * num_perm,
        "signatures must be [n, num_perm] with 1 <= bands * rows_per_band <= num_perm"
    );
    let lsh = MinHashLsh {
        signatures,
        num_perm,
        bands,
        rows_per_band,
        threshold,
    };
    pool.install(|| assign(group_ids, &lsh))
}

/// Anchor ids of SimHash components within each task group: fingerprints within Hamming
/// distance `k`, chained.
///
/// # Panics
/// Unless `k <= 63` and there is one fingerprint per row.
pub fn by_fingerprints(group_ids: &[i64], fingerprints: &[u64], k: u32, pool: &Pool) -> Vec<i64> {
    assert!(
        k <= 63 && fingerprints.len() == group_ids.len(),
        "k must be in 0..=63, with one fingerprint per row"
    );
    pool.install(|| assign(group_ids, &SimHashBlocks { fingerprints, k }))
}

/// Anchor ids of the connected components of `edges` (pairs of rows found similar by the caller,
/// e.g. embeddings with cosine similarity above a threshold), numbered by first appearance in row
/// order. A row in no edge is its own state. Components are a function of the edge set, so the
/// ids do not depend on the order of the edges or of the two rows of an edge.
///
/// # Panics
/// Unless every edge joins two rows (`< group_ids.len()`) of one task group.
pub fn by_edges(group_ids: &[i64], edges: &[[u32; 2]]) -> Vec<i64> {
    let mut uf = UnionFind::new(group_ids.len());
    for &[a, b] in edges {
        let (ga, gb) = (group_ids[a as usize], group_ids[b as usize]);
        assert_eq!(ga, gb, "edge ({a}, {b}) joins task groups {ga} and {gb}");
        uf.union(a, b);
    }
    let rows: Vec<u32> = (0..group_ids.len() as u32).collect();
    label_components(&mut uf, &rows)
        .into_iter()
        .map(i64::from)
        .collect()
}

/// Two numberings of the rows of a batch by 128-bit key (`keys`, two words per row): the first
/// numbers distinct (task group, key) pairs, the second distinct keys, both by first appearance.
/// Equal texts always share a state, so near-duplicate grouping sketches each distinct key once
/// and clusters each distinct pair once.
///
/// # Panics
/// Unless `keys` holds two words per row.
pub fn distinct_pairs(group_ids: &[i64], keys: &[u64], pool: &Pool) -> (Vec<i64>, Vec<i64>) {
    assert_eq!(keys.len(), 2 * group_ids.len(), "two key words per row");
    let exact = Exact { keys, width: 2 };
    let one_group = vec![0i64; group_ids.len()];
    pool.install(|| rayon::join(|| assign(group_ids, &exact), || assign(&one_group, &exact)))
}

/// Local labels from a union-find over `n` items, numbered by first appearance of `item_of_row`.
fn label_components(uf: &mut UnionFind, item_of_row: &[u32]) -> Vec<u32> {
    let mut label: FxHashMap<u32, u32> = FxHashMap::default();
    item_of_row
        .iter()
        .map(|&item| {
            let root = uf.find(item);
            let next = label.len() as u32;
            *label.entry(root).or_insert(next)
        })
        .collect()
}

/// Distinct values among `rows` (first-appearance order) and each row's index into them.
/// Identical rows are always in one group, so near-duplicate search runs on distinct rows only.
fn distinct<'a, K: Hash + Eq + 'a>(rows: &[u32], key: impl Fn(u32) -> K) -> (Vec<u32>, Vec<u32>) {
    let mut seen: FxHashMap<K, u32> = FxHashMap::default();
    let mut reps = Vec::new();
    let inverse = rows
        .iter()
        .map(|&row| {
            *seen.entry(key(row)).or_insert_with(|| {
                reps.push(row);
                reps.len() as u32 - 1
            })
        })
        .collect();
    (reps, inverse)
}

/// Reusable buffers of [`union_buckets`]: one bucket's processed members, by component.
#[derive(Default)]
struct BucketScratch {
    /// Members of each component seen so far in the bucket (emptied when merged away).
    groups: Vec<Vec<u32>>,
    /// Indices of the non-empty entries of `groups`.
    live: Vec<usize>,
    /// Union-find root of each live group.
    group_of_root: FxHashMap<u32, usize>,
    /// Groups the current member joins.
    joined: Vec<usize>,
}

/// Unions items that share a bucket key and pass `similar`.
///
/// The result is the connected components of the confirmed pairs (`similar` and a shared
/// bucket), merged into those `uf` already holds. Testing every pair of a bucket would be
/// quadratic even when the bucket is one component, so each bucket's members are kept grouped
/// by component as they are visited: a new member is tested against every component it is not
/// already in, and within one only until its first confirmed match (the member then joins that
/// whole component). Every confirmed pair (a, b) still ends in one component: when the later of
/// the two is visited, it either is already in the other's component or is tested against it.
/// A bucket whose members fall into few components thus costs about one test per member and
/// component, and only a bucket of many mutually dissimilar members costs its pairs.
fn union_buckets(
    uf: &mut UnionFind,
    mut entries: Vec<(u64, u32)>,
    similar: impl Fn(u32, u32) -> bool,
) {
    entries.sort_unstable();
    let mut scratch = BucketScratch::default();
    for bucket in entries.chunk_by(|x, y| x.0 == y.0) {
        union_any_bucket(uf, bucket, &similar, &mut scratch);
    }
}

/// [`union_bucket`], with the common one- and two-member buckets done directly.
fn union_any_bucket(
    uf: &mut UnionFind,
    bucket: &[(u64, u32)],
    similar: &impl Fn(u32, u32) -> bool,
    scratch: &mut BucketScratch,
) {
    match bucket {
        [] | [_] => {}
        [(_, a), (_, b)] => {
            if uf.find(*a) != uf.find(*b) && similar(*a, *b) {
                uf.union(*a, *b);
            }
        }
        _ => union_bucket(uf, bucket, similar, scratch),
    }
}

fn union_bucket(
    uf: &mut UnionFind,
    bucket: &[(u64, u32)],
    similar: &impl Fn(u32, u32) -> bool,
    s: &mut BucketScratch,
) {
    s.groups.clear();
    s.live.clear();
    s.group_of_root.clear();
    for &(_, b) in bucket {
        // Only this function unions while a bucket is processed, so `group_of_root` stays exact.
        let own = s.group_of_root.get(&uf.find(b)).copied();
        s.joined.clear();
        s.joined.extend(own);
        for &g in &s.live {
            if Some(g) != own && s.groups[g].iter().any(|&a| similar(a, b)) {
                s.joined.push(g);
            }
        }
        let Some(&first) = s.joined.first() else {
            s.group_of_root.insert(uf.find(b), s.groups.len());
            s.live.push(s.groups.len());
            s.groups.push(vec![b]);
            continue;
        };
        // Merge b and every joined group into the largest of them.
        let target = s
            .joined
            .iter()
            .copied()
            .max_by_key(|&g| s.groups[g].len())
            .unwrap_or(first);
        for i in 0..s.joined.len() {
            let g = s.joined[i];
            let root = uf.find(s.groups[g][0]);
            s.group_of_root.remove(&root);
            uf.union(s.groups[g][0], b);
            if g != target {
                let moved = std::mem::take(&mut s.groups[g]);
                s.groups[target].extend(moved);
            }
        }
        s.groups[target].push(b);
        s.group_of_root.insert(uf.find(b), target);
        let groups = &s.groups;
        s.live.retain(|&g| !groups[g].is_empty());
    }
}

/// Exact grouping: rows with equal keys (`width` u64 words per row) share an id.
pub struct Exact<'a> {
    pub keys: &'a [u64],
    pub width: usize,
}

impl Cluster for Exact<'_> {
    fn cluster(&self, rows: &[u32]) -> Vec<u32> {
        let w = self.width;
        distinct(rows, |r| &self.keys[r as usize * w..(r as usize + 1) * w]).1
    }
}

/// MinHash-LSH grouping: candidates share one of `bands` bands of `rows_per_band` lanes, and are
/// joined when the estimated Jaccard (share of equal lanes) is at least `threshold`.
pub struct MinHashLsh<'a, T> {
    pub signatures: &'a [T],
    pub num_perm: usize,
    pub bands: usize,
    pub rows_per_band: usize,
    pub threshold: f64,
}

impl<T: bytemuck::Pod + Eq + Hash + Sync> MinHashLsh<'_, T> {
    fn signature(&self, row: u32) -> &[T] {
        &self.signatures[row as usize * self.num_perm..(row as usize + 1) * self.num_perm]
    }

    /// datasketch's `MinHash.jaccard`: equal lanes / num_perm, in f64.
    fn jaccard(&self, a: u32, b: u32) -> f64 {
        let equal = self
            .signature(a)
            .iter()
            .zip(self.signature(b))
            .filter(|(x, y)| x == y)
            .count();
        equal as f64 / self.num_perm as f64
    }
}

impl<T: bytemuck::Pod + Eq + Hash + Sync> Cluster for MinHashLsh<'_, T> {
    fn cluster(&self, rows: &[u32]) -> Vec<u32> {
        let (reps, inverse) = distinct(rows, |r| self.signature(r));
        let mut uf = UnionFind::new(reps.len());
        if reps.len() > 1 {
            for band in 0..self.bands {
                let lanes = band * self.rows_per_band..(band + 1) * self.rows_per_band;
                // A 64-bit digest of the band stands in for its bytes: a collision only adds a
                // candidate, which the Jaccard test still has to confirm.
                let entries = reps
                    .iter()
                    .enumerate()
                    .map(|(u, &row)| {
                        (
                            xxh3_64(bytemuck::cast_slice(&self.signature(row)[lanes.clone()])),
                            u as u32,
                        )
                    })
                    .collect();
                union_buckets(&mut uf, entries, |a, b| {
                    self.jaccard(reps[a as usize], reps[b as usize]) >= self.threshold
                });
            }
        }
        label_components(&mut uf, &inverse)
    }
}

/// SimHash grouping: rows whose fingerprints differ in at most `k` bits are joined.
///
/// Candidates come from a block (pigeonhole) index: with the 64 bits cut into k + 1 blocks, two
/// fingerprints within distance k agree on at least one whole block, so no pair is missed.
pub struct SimHashBlocks<'a> {
    pub fingerprints: &'a [u64],
    pub k: u32,
}

/// The set bits of `free`, lowest first, cut into `parts` runs of `n / parts` bits (the last run
/// takes the remainder).
fn split_bits(free: u64, parts: usize) -> Vec<u64> {
    let bits: Vec<u32> = (0..64).filter(|&i| free >> i & 1 == 1).collect();
    let step = bits.len() / parts;
    (0..parts)
        .map(|i| {
            let hi = if i + 1 == parts {
                bits.len()
            } else {
                (i + 1) * step
            };
            bits[i * step..hi].iter().fold(0u64, |m, &b| m | 1 << b)
        })
        .collect()
}

/// Block buckets larger than this are split again on the bits their block leaves free.
const SPLIT_BUCKET: usize = 32;

impl SimHashBlocks<'_> {
    /// Unions the pairs of `items` (indices into `reps`) within distance k. All of `items` agree on
    /// the bits outside `free`, so a pair within distance k differs only inside `free`: cut into
    /// k + 1 blocks, `free` has one on which the pair agrees (pigeonhole). A bucket of one block
    /// that is still large is split the same way on the bits its block leaves free, so members
    /// that share a block but are far apart are not all compared with each other.
    fn union_blocks(
        &self,
        uf: &mut UnionFind,
        items: &[u32],
        free: u64,
        fp: &impl Fn(u32) -> u64,
        scratch: &mut BucketScratch,
    ) {
        let similar = |a: u32, b: u32| hamming(fp(a), fp(b)) <= self.k;
        let mut entries = Vec::with_capacity(items.len());
        for mask in split_bits(free, self.k as usize + 1) {
            entries.clear();
            entries.extend(items.iter().map(|&u| (fp(u) & mask, u)));
            entries.sort_unstable();
            let rest = free & !mask;
            for bucket in entries.chunk_by(|x, y| x.0 == y.0) {
                if bucket.len() > SPLIT_BUCKET && rest.count_ones() > self.k {
                    let members: Vec<u32> = bucket.iter().map(|&(_, u)| u).collect();
                    self.union_blocks(uf, &members, rest, fp, scratch);
                } else {
                    union_any_bucket(uf, bucket, &similar, scratch);
                }
            }
        }
    }
}

impl Cluster for SimHashBlocks<'_> {
    fn cluster(&self, rows: &[u32]) -> Vec<u32> {
        let (reps, inverse) = distinct(rows, |r| self.fingerprints[r as usize]);
        let mut uf = UnionFind::new(reps.len());
        if reps.len() > 1 && self.k > 0 {
            let fp = |u: u32| self.fingerprints[reps[u as usize] as usize];
            let items: Vec<u32> = (0..reps.len() as u32).collect();
            let mut scratch = BucketScratch::default();
            self.union_blocks(&mut uf, &items, u64::MAX, &fp, &mut scratch);
        }
        label_components(&mut uf, &inverse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(groups: &[i64], keys: &[u64]) -> Vec<i64> {
        assign(groups, &Exact { keys, width: 1 })
    }

    #[test]
    fn exact_is_dense_and_respects_task_groups() {
        assert_eq!(exact(&[0, 0, 1, 1, 0], &[7, 8, 7, 7, 7]), [0, 1, 2, 2, 0]);
        assert_eq!(exact(&[], &[]), Vec::<i64>::new());
    }

    #[test]
    fn edges_give_components_numbered_by_first_appearance() {
        // 4 ~ 1 and 1 ~ 3 chain; 0 and 2 are alone; the edge order and direction do not matter.
        let groups = [7, 7, 9, 7, 7];
        assert_eq!(by_edges(&groups, &[[4, 1], [1, 3]]), [0, 1, 2, 1, 1]);
        assert_eq!(
            by_edges(&groups, &[[3, 1], [1, 4], [4, 3]]),
            [0, 1, 2, 1, 1]
        );
        assert_eq!(by_edges(&groups, &[]), [0, 1, 2, 3, 4]);
        assert_eq!(by_edges(&[], &[]), Vec::<i64>::new());
    }

    #[test]
    #[should_panic(expected = "joins task groups")]
    fn edges_across_task_groups_are_refused() {
        by_edges(&[0, 1], &[[0, 1]]);
    }

    #[test]
    fn simhash_components_chain_and_stay_in_group() {
        // 0b000 ~ 0b001 ~ 0b011 chain at k = 1; 0b111 in another task group stays apart.
        let fps = [0b000, 0b011, 0b001, 0b111, 0b1111_0000];
        let ids = assign(
            &[5, 5, 5, 6, 5],
            &SimHashBlocks {
                fingerprints: &fps,
                k: 1,
            },
        );
        assert_eq!(ids, [0, 0, 0, 1, 2]);
    }

    #[test]
    fn block_masks_cover_all_bits_once() {
        // The k + 1 blocks of all 64 bits, laid out as the package's `SimhashIndex` offsets.
        let block_masks = |k: u32| split_bits(u64::MAX, k as usize + 1);
        for k in [0, 1, 2, 3, 7, 63] {
            let masks = block_masks(k);
            assert_eq!(masks.len(), k as usize + 1);
            assert_eq!(masks.iter().fold(0, |acc, m| acc | m), u64::MAX);
            assert_eq!(masks.iter().map(|m| m.count_ones()).sum::<u32>(), 64);
        }
        // The package's layout: k = 3 gives four 16-bit blocks, low bits first.
        assert_eq!(
            block_masks(3),
            [0xFFFF, 0xFFFF << 16, 0xFFFF << 32, 0xFFFF << 48]
        );
        // Sub-blocks of the bits a block leaves free: disjoint, covering exactly those bits.
        let free = !0xFFFFu64 & !(0xFF << 40);
        let parts = split_bits(free, 4);
        assert_eq!(parts.iter().fold(0, |acc, m| acc | m), free);
        assert_eq!(
            parts.iter().map(|m| m.count_ones()).sum::<u32>(),
            free.count_ones()
        );
    }

    /// splitmix64: a small deterministic generator for the randomised tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Partition of rows induced by labels (labels forgotten), as sorted row lists.
    fn partition(ids: &[i64]) -> Vec<Vec<usize>> {
        let mut blocks: FxHashMap<i64, Vec<usize>> = FxHashMap::default();
        for (row, &id) in ids.iter().enumerate() {
            blocks.entry(id).or_default().push(row);
        }
        let mut out: Vec<Vec<usize>> = blocks.into_values().collect();
        out.sort();
        out
    }

    /// Brute-force oracle: connected components of the pairs `edge` accepts (same task group
    /// checked here), over every pair of rows.
    fn oracle(groups: &[i64], edge: impl Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
        let n = groups.len();
        let mut uf = UnionFind::new(n);
        for i in 0..n {
            for j in 0..i {
                if groups[i] == groups[j] && edge(i, j) {
                    uf.union(i as u32, j as u32);
                }
            }
        }
        let roots: Vec<i64> = (0..n as u32).map(|i| i64::from(uf.find(i))).collect();
        partition(&roots)
    }

    #[test]
    fn minhash_equals_all_pairs_components_with_large_buckets() {
        let mut rng = Rng(7);
        for case in 0..40 {
            let (num_perm, bands, rows_per_band) = [(16, 4, 4), (32, 8, 4), (24, 2, 12)][case % 3];
            let n = [50, 200, 400][case % 3];
            // Few families with small lane alphabets: bands collide often, so buckets are large,
            // and lanes are redrawn at several rates, so buckets hold several components.
            let families: Vec<Vec<u32>> = (0..1 + rng.below(4))
                .map(|_| (0..num_perm).map(|_| rng.below(3) as u32).collect())
                .collect();
            let mut sigs = Vec::with_capacity(n * num_perm);
            for _ in 0..n {
                let base = &families[rng.below(families.len() as u64) as usize];
                let rate = [0, 5, 20, 50][rng.below(4) as usize];
                sigs.extend(base.iter().map(|&x| {
                    if rng.below(100) < rate {
                        rng.below(4) as u32
                    } else {
                        x
                    }
                }));
            }
            let groups: Vec<i64> = (0..n).map(|_| rng.below(2) as i64).collect();
            let threshold = [0.5, 0.7, 0.9][case / 3 % 3];
            let lsh = MinHashLsh {
                signatures: &sigs,
                num_perm,
                bands,
                rows_per_band,
                threshold,
            };
            let sig = |r: usize| &sigs[r * num_perm..(r + 1) * num_perm];
            let expect = oracle(&groups, |i, j| {
                let candidate = (0..bands).any(|b| {
                    let lanes = b * rows_per_band..(b + 1) * rows_per_band;
                    sig(i)[lanes.clone()] == sig(j)[lanes]
                });
                let equal = sig(i).iter().zip(sig(j)).filter(|(x, y)| x == y).count();
                candidate && equal as f64 / num_perm as f64 >= threshold
            });
            assert_eq!(partition(&assign(&groups, &lsh)), expect, "case {case}");
        }
    }

    #[test]
    fn simhash_equals_all_pairs_components_with_large_buckets() {
        let mut rng = Rng(11);
        for case in 0..40 {
            let n = [50, 200, 400][case % 3];
            let k = [1, 3, 6, 10][case % 4];
            // Families of nearby fingerprints whose high 48 bits are mostly zero: the low
            // blocks collide across the whole batch (large buckets of several components).
            let bases: Vec<u64> = (0..1 + rng.below(5))
                .map(|_| rng.next() & 0xFFFF_0000_0000_FFFF)
                .collect();
            let fps: Vec<u64> = (0..n)
                .map(|_| {
                    let mut fp = bases[rng.below(bases.len() as u64) as usize];
                    for _ in 0..rng.below(2 * k as u64 + 2) {
                        fp ^= 1 << rng.below(64);
                    }
                    fp
                })
                .collect();
            let groups: Vec<i64> = (0..n).map(|_| rng.below(2) as i64).collect();
            let expect = oracle(&groups, |i, j| hamming(fps[i], fps[j]) <= k);
            let ids = assign(
                &groups,
                &SimHashBlocks {
                    fingerprints: &fps,
                    k,
                },
            );
            assert_eq!(partition(&ids), expect, "case {case}");
        }
    }

    #[test]
    fn minhash_partition_does_not_depend_on_row_order() {
        // Signatures over 8 lanes with controlled overlaps: rows 0 and 1 share 7 lanes.
        let sigs: Vec<u32> = vec![
            1, 2, 3, 4, 5, 6, 7, 8, //
            1, 2, 3, 4, 5, 6, 7, 9, //
            9, 9, 9, 9, 9, 9, 9, 9, //
            1, 2, 3, 4, 5, 6, 7, 8,
        ];
        let lsh = |sigs: &[u32]| {
            assign(
                &[0, 0, 0, 0],
                &MinHashLsh {
                    signatures: sigs,
                    num_perm: 8,
                    bands: 4,
                    rows_per_band: 2,
                    threshold: 0.8,
                },
            )
        };
        assert_eq!(lsh(&sigs), [0, 0, 1, 0]);
        let mut reversed = Vec::new();
        for row in (0..4).rev() {
            reversed.extend_from_slice(&sigs[row * 8..(row + 1) * 8]);
        }
        assert_eq!(lsh(&reversed), [0, 1, 0, 0]);
    }

    #[test]
    fn drivers_equal_assign() {
        let pool = Pool::with_threads(2).unwrap();
        let groups = [0, 0, 1, 1, 0];
        let keys = [7u64, 1, 8, 1, 7, 1, 7, 1, 7, 1];
        assert_eq!(by_keys(&groups, &keys, 2, &pool), [0, 1, 2, 2, 0]);
        assert_eq!(
            distinct_pairs(&groups, &keys, &pool),
            (vec![0, 1, 2, 2, 0], vec![0, 1, 0, 0, 0])
        );
        let fps = [0b000, 0b011, 0b001, 0b111, 0b1111_0000];
        assert_eq!(
            by_fingerprints(&[5, 5, 5, 6, 5], &fps, 1, &pool),
            [0, 0, 0, 1, 2]
        );
        let sigs: Vec<u64> = vec![1, 2, 3, 4, 1, 2, 3, 5, 9, 9, 9, 9];
        assert_eq!(
            by_signatures(&[0, 0, 0], &sigs, 4, (2, 2), 0.7, &pool),
            [0, 0, 1]
        );
    }

    #[test]
    #[should_panic(expected = "bands * rows_per_band")]
    fn banding_beyond_the_lanes_panics() {
        by_signatures(&[0], &[1u32, 2], 2, (3, 1), 0.5, &Pool::default());
    }
}
