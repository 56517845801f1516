// What the CUDA kernels share: launch sizes, scratch memory from torch's caching allocator
// and the building blocks of a counting sort over dense ids (a histogram and a scan), defined in common.cu.
// Nothing here synchronises with the host: every size a kernel needs is known from tensor shapes, so an op
// can be captured in a CUDA graph.
#pragma once
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cub/cub.cuh>

#include "checks.h"

namespace pyagentrl::cuda {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

inline unsigned int blocks_for(int64_t work, int threads = kThreads) {
  const int64_t blocks = (work + threads - 1) / threads;
  TORCH_CHECK_VALUE(blocks <= 2147483647, "a launch of ", work, " threads exceeds the CUDA grid limit");
  return static_cast<unsigned int>(blocks);
}

// The position of this thread in a one-thread-per-item launch.
__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// The sum of v over the warp's 32 lanes, whole in lane 0: a fixed shuffle tree, so the same on every run.
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(kFullMask, v, offset);
  return v;
}

// At least one byte: CUB reads a null pointer as "tell me the size" and would then do nothing.
inline at::Tensor scratch(size_t bytes, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, like.options().dtype(at::kByte));
}

// int64 [bound]: how many rows carry each id in [0, bound). Integer atomics, so the counts are exact and the same
// whatever order the rows land in. An id outside the range stops the kernel with a device-side assert (the
// Python API rejects it with a clear message before any kernel runs).
at::Tensor count_ids(const at::Tensor& ids, int64_t bound, cudaStream_t stream);

// int64 [n]: out[i] = in[0] + ... + in[i-1].
at::Tensor exclusive_sum(const at::Tensor& in, cudaStream_t stream);

// int64 [n]: out[i] = in[0] + ... + in[i].
at::Tensor inclusive_sum(const at::Tensor& in, cudaStream_t stream);

// A hash-table slot or a row slot that nothing has claimed yet (all bits set: larger than any row index).
constexpr unsigned long long kEmptySlot = ~0ULL;

}  // namespace pyagentrl::cuda
