// The counting and scanning steps the CUDA kernels share (declared in common.cuh).
#include "common.cuh"

namespace pyagentrl::cuda {
namespace {

__global__ void count_ids_kernel(const int64_t* __restrict__ ids, int64_t n, int64_t bound,
                                 unsigned long long* __restrict__ counts) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t id = ids[i];
  CUDA_KERNEL_ASSERT(id >= 0 && id < bound);
  atomicAdd(counts + id, 1ULL);
}

// CUB's two-call protocol: ask for the scratch size, then run with scratch from torch's allocator.
template <typename Scan>
at::Tensor scan(const at::Tensor& in, Scan run) {
  at::Tensor out = at::empty_like(in);
  const int64_t n = in.numel();
  if (n == 0) return out;
  size_t bytes = 0;
  C10_CUDA_CHECK(run(nullptr, bytes, in.data_ptr<int64_t>(), out.data_ptr<int64_t>(), n));
  at::Tensor temp = scratch(bytes, in);
  C10_CUDA_CHECK(run(temp.data_ptr(), bytes, in.data_ptr<int64_t>(), out.data_ptr<int64_t>(), n));
  return out;
}

}  // namespace

at::Tensor count_ids(const at::Tensor& ids, int64_t bound, cudaStream_t stream) {
  at::Tensor counts = at::zeros({bound}, ids.options());
  const int64_t n = ids.numel();
  if (n > 0) {
    count_ids_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        ids.data_ptr<int64_t>(), n, bound, reinterpret_cast<unsigned long long*>(counts.data_ptr<int64_t>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return counts;
}

at::Tensor exclusive_sum(const at::Tensor& in, cudaStream_t stream) {
  return scan(in, [stream](void* temp, size_t& bytes, const int64_t* x, int64_t* y, int64_t n) {
    return cub::DeviceScan::ExclusiveSum(temp, bytes, x, y, n, stream);
  });
}

at::Tensor inclusive_sum(const at::Tensor& in, cudaStream_t stream) {
  return scan(in, [stream](void* temp, size_t& bytes, const int64_t* x, int64_t* y, int64_t n) {
    return cub::DeviceScan::InclusiveSum(temp, bytes, x, y, n, stream);
  });
}

}  // namespace pyagentrl::cuda
