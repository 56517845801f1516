// Grouped statistics, group normalisation and pair factorisation on CUDA (docs/algorithms.md (S1)-(S5), (G6)),
// with the formulas of csrc/formulas.h that the CPU kernels use.
//
// Deterministic by construction: the values are put in a stable order by group (a radix sort over the id bits: a
// counting sort digit by digit, so values of one group keep their input order), one warp reduces each group in
// a fixed order (lane-strided compensated sums, then a fixed shuffle tree), and no float is ever added
// atomically. Statistics accumulate in double; an all-equal group normalises to exactly 0. Nothing synchronises
// with the host: num_groups bounds every table (pass the number of rows when the exact count is not known).
#include <torch/library.h>

#include "common.cuh"
#include "formulas.h"

namespace pyagentrl::cuda {
namespace {

// The values ordered by group id; within a group, in input order. Sorting the values themselves (not row
// indices) lets the per-group passes read contiguous memory instead of gathering.
at::Tensor values_by_group(const at::Tensor& x, const at::Tensor& ids, int64_t num_groups, cudaStream_t stream) {
  const int64_t n = ids.numel();
  if (n == 0 || num_groups <= 1) return x;
  at::Tensor sorted = at::empty_like(x);
  at::Tensor keys_out = at::empty_like(ids);
  int end_bit = 1;  // only the bits an id in [0, num_groups) can use
  while (end_bit < 63 && (int64_t{1} << end_bit) < num_groups) ++end_bit;
  const auto* keys = reinterpret_cast<const uint64_t*>(ids.data_ptr<int64_t>());
  auto* sorted_keys = reinterpret_cast<uint64_t*>(keys_out.data_ptr<int64_t>());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "values_by_group", [&] {
    size_t bytes = 0;
    C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, sorted_keys, x.data_ptr<scalar_t>(),
                                                   sorted.data_ptr<scalar_t>(), n, 0, end_bit, stream));
    at::Tensor temp = scratch(bytes, ids);
    C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), bytes, keys, sorted_keys,
                                                   x.data_ptr<scalar_t>(), sorted.data_ptr<scalar_t>(), n, 0,
                                                   end_bit, stream));
  });
  return sorted;
}

// Lane 0 ends with the moments of the whole warp, merged in a fixed tree.
__device__ formulas::Moments warp_merge(formulas::Moments m) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    formulas::Moments other;
    other.sum = __shfl_down_sync(kFullMask, m.sum, offset);
    other.comp = __shfl_down_sync(kFullMask, m.comp, offset);
    other.lo = __shfl_down_sync(kFullMask, m.lo, offset);
    other.hi = __shfl_down_sync(kFullMask, m.hi, offset);
    other.count = __shfl_down_sync(kFullMask, m.count, offset);
    formulas::merge(m, other);
  }
  return m;
}

// One warp per group: mean and std (S1)-(S2) of the group's values, x[offsets[g], offsets[g] + counts[g]) of the
// group-ordered values.
template <typename scalar_t>
__global__ void group_moments_kernel(const scalar_t* __restrict__ x, const int64_t* __restrict__ offsets,
                                     const int64_t* __restrict__ counts,
                                     int64_t num_groups, bool unbiased, bool singleton_raw, double* __restrict__ mean,
                                     double* __restrict__ std) {
  const int64_t g = thread_index() / kWarp;  // the same for every lane of a warp
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (g >= num_groups) return;
  const int64_t begin = offsets[g];
  const int64_t end = begin + counts[g];
  formulas::Moments m;
  for (int64_t k = begin + lane; k < end; k += kWarp) formulas::add_value(m, static_cast<double>(x[k]));
  m = warp_merge(m);
  const double mu = __shfl_sync(kFullMask, formulas::group_mean(m), 0);
  double squared = 0.0;  // second pass, around the final mean
  for (int64_t k = begin + lane; k < end; k += kWarp) {
    const double d = static_cast<double>(x[k]) - mu;
    squared += d * d;
  }
  squared = warp_sum(squared);
  if (lane == 0) {
    double group_mean = mu;
    double group_std = formulas::group_std(squared, m, unbiased);
    if (singleton_raw) formulas::singleton_as_raw(m.count, group_mean, group_std);
    mean[g] = group_mean;
    std[g] = group_std;
  }
}

template <typename scalar_t>
__global__ void normalize_kernel(const scalar_t* __restrict__ x, const int64_t* __restrict__ ids,
                                 const double* __restrict__ mean, const double* __restrict__ std, int64_t n,
                                 bool scale, double eps, scalar_t* __restrict__ out) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t g = ids[i];
  out[i] = static_cast<scalar_t>(formulas::normalized(static_cast<double>(x[i]), mean[g], std[g], scale, eps));
}

struct GroupTables {
  at::Tensor count;  // int64 [G]
  at::Tensor mean;   // float64 [G]
  at::Tensor std;    // float64 [G]
};

GroupTables group_tables(const at::Tensor& x, const at::Tensor& ids, int64_t num_groups, bool unbiased,
                         bool singleton_raw, cudaStream_t stream) {
  GroupTables t;
  t.count = count_ids(ids, num_groups, stream);  // first: its assert guards the id range the sort relies on
  const at::Tensor offsets = exclusive_sum(t.count, stream);
  const at::Tensor sorted = values_by_group(x, ids, num_groups, stream);
  t.mean = at::empty({num_groups}, x.options().dtype(at::kDouble));
  t.std = at::empty({num_groups}, x.options().dtype(at::kDouble));
  if (num_groups == 0) return t;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "group_moments", [&] {
    group_moments_kernel<scalar_t><<<blocks_for(num_groups * kWarp), kThreads, 0, stream>>>(
        sorted.data_ptr<scalar_t>(), offsets.data_ptr<int64_t>(), t.count.data_ptr<int64_t>(),
        num_groups, unbiased, singleton_raw, t.mean.data_ptr<double>(), t.std.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return t;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> grouped_stats_cuda(const at::Tensor& values,
                                                                  const at::Tensor& group_ids, int64_t num_groups,
                                                                  bool unbiased) {
  check_grouped_args(values, group_ids, num_groups, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(values.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor x = values.contiguous();
  const GroupTables t = group_tables(x, group_ids.contiguous(), num_groups, unbiased, false, stream);
  return {t.count, t.mean.to(x.scalar_type()), t.std.to(x.scalar_type())};
}

at::Tensor group_normalize_cuda(const at::Tensor& values, const at::Tensor& group_ids, int64_t num_groups, bool scale,
                                bool unbiased, double eps, bool singleton_raw) {
  check_grouped_args(values, group_ids, num_groups, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(values.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor x = values.contiguous();
  const at::Tensor ids = group_ids.contiguous();
  const GroupTables t = group_tables(x, ids, num_groups, unbiased, singleton_raw, stream);
  at::Tensor out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "group_normalize", [&] {
    normalize_kernel<scalar_t><<<blocks_for(n), kThreads, 0, stream>>>(
        x.data_ptr<scalar_t>(), ids.data_ptr<int64_t>(), t.mean.data_ptr<double>(), t.std.data_ptr<double>(), n,
        scale, eps, out.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

// Pass 1: every row claims its pair's slot (open addressing, linear probing); the slot ends up holding the
// smallest row with that pair, its first appearance. A slot's pair never changes once claimed.
__global__ void insert_pairs_kernel(const int64_t* __restrict__ a, const int64_t* __restrict__ b, int64_t n,
                                    unsigned long long* __restrict__ table, uint64_t mask) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t ai = a[i];
  const int64_t bi = b[i];
  uint64_t h = formulas::mix_pair(ai, bi) & mask;
  while (true) {
    const unsigned long long owner = atomicCAS(table + h, kEmptySlot, static_cast<unsigned long long>(i));
    if (owner == kEmptySlot) return;
    if (a[owner] == ai && b[owner] == bi) {
      atomicMin(table + h, static_cast<unsigned long long>(i));
      return;
    }
    h = (h + 1) & mask;
  }
}

// Pass 2: each row's first appearance, and whether the row is one.
__global__ void first_rows_kernel(const int64_t* __restrict__ a, const int64_t* __restrict__ b, int64_t n,
                                  const unsigned long long* __restrict__ table, uint64_t mask,
                                  int64_t* __restrict__ first, int64_t* __restrict__ is_first) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t ai = a[i];
  const int64_t bi = b[i];
  uint64_t h = formulas::mix_pair(ai, bi) & mask;
  while (true) {
    const unsigned long long owner = table[h];
    CUDA_KERNEL_ASSERT(owner != kEmptySlot);  // pass 1 inserted every pair
    if (a[owner] == ai && b[owner] == bi) {
      first[i] = static_cast<int64_t>(owner);
      is_first[i] = owner == static_cast<unsigned long long>(i);
      return;
    }
    h = (h + 1) & mask;
  }
}

// Pass 3 (after an inclusive scan of is_first): the dense id of a row is the rank of its first appearance.
__global__ void label_rows_kernel(const int64_t* __restrict__ first, const int64_t* __restrict__ rank, int64_t n,
                                  int64_t* __restrict__ out) {
  const int64_t i = thread_index();
  if (i >= n) return;
  out[i] = rank[first[i]] - 1;
}

std::tuple<at::Tensor, at::Tensor> factorize_pairs_cuda(const at::Tensor& a, const at::Tensor& b) {
  check_pair_args(a, b, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(a.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor ac = a.contiguous();
  const at::Tensor bc = b.contiguous();
  const int64_t n = ac.numel();
  at::Tensor out = at::empty({n}, ac.options());
  if (n == 0) return {out, at::zeros({}, ac.options())};
  const uint64_t capacity = formulas::pair_table_capacity(n);
  at::Tensor table = at::full({static_cast<int64_t>(capacity)}, -1, ac.options());  // all bits set: kEmptySlot
  auto* slots = reinterpret_cast<unsigned long long*>(table.data_ptr<int64_t>());
  at::Tensor first = at::empty({n}, ac.options());
  at::Tensor is_first = at::empty({n}, ac.options());
  const int64_t* ap = ac.data_ptr<int64_t>();
  const int64_t* bp = bc.data_ptr<int64_t>();
  insert_pairs_kernel<<<blocks_for(n), kThreads, 0, stream>>>(ap, bp, n, slots, capacity - 1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  first_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(ap, bp, n, slots, capacity - 1,
                                                           first.data_ptr<int64_t>(), is_first.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor rank = inclusive_sum(is_first, stream);
  label_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(first.data_ptr<int64_t>(), rank.data_ptr<int64_t>(), n,
                                                           out.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, rank.select(0, n - 1).clone()};  // the number of distinct pairs, on the device
}

}  // namespace

TORCH_LIBRARY_IMPL(pyagentrl, CUDA, m) {
  m.impl("grouped_stats", &grouped_stats_cuda);
  m.impl("group_normalize", &group_normalize_cuda);
  m.impl("factorize_pairs", &factorize_pairs_cuda);
}

}  // namespace pyagentrl::cuda
