// Backward recursions along trajectories on CUDA: discounted returns (docs/algorithms.md (G5)) and the GAE-style
// recursion over a value proxy ((V2)-(V3)), with csrc/formulas.h's step.
//
// A counting sort puts the rows in trajectory order without comparing anything: count the rows of each
// trajectory, scan the counts into offsets, and place row i at offset[traj] + step (step ids are 0..n-1, so
// the slot is known). Then one thread per trajectory runs the recursion backwards. Deterministic (each output
// is one thread's sequential recursion) and free of host round trips.
#include <torch/library.h>

#include <optional>

#include "common.cuh"
#include "formulas.h"

namespace pyagentrl::cuda {
namespace {

// rows[offset[t] + step] = row. A trajectory id outside [0, num_trajs), a step outside 0..count-1 or a step given
// twice stops the kernel with a device-side assert (the Python API rejects all three with a clear message first).
// Ids are only compared, never added to before the check: a step id near 2^63 cannot wrap into another bucket.
__global__ void place_rows_kernel(const int64_t* __restrict__ traj, const int64_t* __restrict__ step,
                                  const int64_t* __restrict__ offset, const int64_t* __restrict__ count, int64_t n,
                                  int64_t num_trajs, unsigned long long* __restrict__ rows) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t t = traj[i];
  const int64_t s = step[i];
  CUDA_KERNEL_ASSERT(t >= 0 && t < num_trajs);  // count_ids asserted it too; this kernel reads count[t] itself
  CUDA_KERNEL_ASSERT(s >= 0 && s < count[t]);
  const unsigned long long previous = atomicCAS(rows + offset[t] + s, kEmptySlot, static_cast<unsigned long long>(i));
  CUDA_KERNEL_ASSERT(previous == kEmptySlot);
}

template <typename scalar_t>
__global__ void backward_recursion_kernel(const scalar_t* __restrict__ rewards, const scalar_t* __restrict__ values,
                                          const int64_t* __restrict__ rows, const int64_t* __restrict__ offset,
                                          const int64_t* __restrict__ count, int64_t num_trajs, double gamma,
                                          double gamma_lam, scalar_t* __restrict__ out) {
  const int64_t t = thread_index();
  if (t >= num_trajs) return;
  double advantage = 0.0;   // A_{t+1}; zero past the last step
  double next_value = 0.0;  // V(s_{t+1}); the state after the last step is terminal
  for (int64_t pos = offset[t] + count[t] - 1; pos >= offset[t]; --pos) {
    const int64_t i = rows[pos];
    const double value = values != nullptr ? static_cast<double>(values[i]) : 0.0;
    advantage = formulas::gae_step(static_cast<double>(rewards[i]), value, next_value, advantage, gamma, gamma_lam);
    out[i] = static_cast<scalar_t>(advantage);
    next_value = value;
  }
}

at::Tensor trajectory_gae_cuda(const at::Tensor& rewards, const std::optional<at::Tensor>& values,
                               const at::Tensor& traj_ids, const at::Tensor& step_ids, int64_t num_trajs,
                               double gamma, double lam) {
  check_trajectory_args(rewards, values, traj_ids, step_ids, num_trajs, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(rewards.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor r = rewards.contiguous();
  const at::Tensor v = values.has_value() ? values->contiguous() : at::Tensor();
  const at::Tensor traj = traj_ids.contiguous();
  const at::Tensor step = step_ids.contiguous();
  const int64_t n = r.numel();
  at::Tensor out = at::empty_like(r);
  if (n == 0) return out;

  const at::Tensor count = count_ids(traj, num_trajs, stream);
  const at::Tensor offset = exclusive_sum(count, stream);
  at::Tensor rows = at::full({n}, -1, traj.options());  // all bits set: kEmptySlot
  place_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      traj.data_ptr<int64_t>(), step.data_ptr<int64_t>(), offset.data_ptr<int64_t>(), count.data_ptr<int64_t>(), n,
      num_trajs, reinterpret_cast<unsigned long long*>(rows.data_ptr<int64_t>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (num_trajs == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(r.scalar_type(), "trajectory_gae", [&] {
    backward_recursion_kernel<scalar_t><<<blocks_for(num_trajs), kThreads, 0, stream>>>(
        r.data_ptr<scalar_t>(), v.defined() ? v.data_ptr<scalar_t>() : nullptr, rows.data_ptr<int64_t>(),
        offset.data_ptr<int64_t>(), count.data_ptr<int64_t>(), num_trajs, gamma, gamma * lam,
        out.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyagentrl, CUDA, m) { m.impl("trajectory_gae", &trajectory_gae_cuda); }

}  // namespace pyagentrl::cuda
