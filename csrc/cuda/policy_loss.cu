// Per-action importance ratio and clipped PPO loss per token on CUDA (docs/algorithms.md (L1)-(L3)), with
// csrc/formulas.h's ratio and token loss. Returns (token_loss, token_ratio, dloss_dlogp) like the CPU kernel;
// dloss_dlogp is the whole gradient the autograd formula needs (pyagentrl/ops/_library.py), so the backward
// pass is one elementwise product.
//
// One warp per row. It walks the row in chunks of 32 tokens (coalesced loads) and accumulates each action's
// masked log-ratio and mask sums in double, in a fixed order: within a chunk the lanes of one action are summed
// in lane order by the lowest of them, and chunks follow each other. No float atomics, so the result is the
// same on every run. Without segment_ids the whole row is one action and the sums stay in registers (a fixed
// shuffle tree). With segment_ids each warp keeps two doubles per token position (an action id is < L) in
// shared memory, or in global scratch when a row is too long for that (then at most 4096 rows are in flight and
// the scratch stays under 512 MiB, or one block's 8 x L x 16 bytes for rows longer than 4M tokens).
#include <torch/library.h>

#include <algorithm>
#include <optional>

#include "common.cuh"
#include "formulas.h"

namespace pyagentrl::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr size_t kSharedBytes = 48 * 1024;  // available to every kernel without an opt-in
constexpr int64_t kScratchWarps = 4096;      // at most this many warps in flight on the global-scratch path,
constexpr int64_t kScratchBytes = 512 << 20;  // and at most this much scratch (fewer warps for very long rows)

template <typename scalar_t>
struct LossArgs {
  const scalar_t* logp;
  const scalar_t* old_logp;
  const scalar_t* advantages;
  const scalar_t* mask;
  const int64_t* segments;  // nullptr: the row is one action
  int64_t rows;
  int64_t len;
  double clip_low;
  double clip_high;
  double* scratch;  // per-row (log-ratio sum, mask sum) pairs in global memory, or nullptr for shared memory
  scalar_t* loss;
  scalar_t* ratio;
  scalar_t* dloss;
};

template <typename scalar_t>
__device__ void write_token(const LossArgs<scalar_t>& p, int64_t k, double action_ratio) {
  if (p.mask[k] == 0) {
    p.loss[k] = 0;
    p.ratio[k] = 1;
    p.dloss[k] = 0;
    return;
  }
  const formulas::TokenLoss t =
      formulas::clipped_token(static_cast<double>(p.advantages[k]), action_ratio, p.clip_low, p.clip_high);
  p.loss[k] = static_cast<scalar_t>(t.loss);
  p.ratio[k] = static_cast<scalar_t>(action_ratio);
  p.dloss[k] = static_cast<scalar_t>(t.dloss_dlogp);
}

// A masked token's terms of (L1): m (logp - old) and m.
template <typename scalar_t>
__device__ void token_terms(const LossArgs<scalar_t>& p, int64_t k, double& log_ratio, double& weight) {
  const double m = static_cast<double>(p.mask[k]);
  log_ratio = m * (static_cast<double>(p.logp[k]) - static_cast<double>(p.old_logp[k]));
  weight = m;
}

// The row is one action: lane-strided sums, a fixed shuffle tree, lane 0's ratio broadcast to the warp.
template <typename scalar_t>
__device__ void sequence_row(const LossArgs<scalar_t>& p, int64_t row, int lane) {
  const int64_t base = row * p.len;
  double log_ratio = 0.0;
  double weight = 0.0;
  for (int64_t j = lane; j < p.len; j += kWarp) {
    if (p.mask[base + j] == 0) continue;
    double lr;
    double w;
    token_terms(p, base + j, lr, w);
    log_ratio += lr;
    weight += w;
  }
  log_ratio = warp_sum(log_ratio);
  weight = warp_sum(weight);
  const double s = __shfl_sync(kFullMask, formulas::action_ratio(log_ratio, weight), 0);
  for (int64_t j = lane; j < p.len; j += kWarp) write_token(p, base + j, s);
}

// Actions marked by segment ids: acc[2 s] and acc[2 s + 1] hold action s's two sums.
template <typename scalar_t>
__device__ void segmented_row(const LossArgs<scalar_t>& p, int64_t row, int lane, double* acc) {
  const int64_t base = row * p.len;
  __syncwarp();  // the warp's previous row (same acc) is read to the end before anything is zeroed
  for (int64_t j = lane; j < 2 * p.len; j += kWarp) acc[j] = 0.0;
  __syncwarp();
  for (int64_t chunk = 0; chunk < p.len; chunk += kWarp) {
    const int64_t j = chunk + lane;
    const bool active = j < p.len && p.mask[base + j] != 0;
    int64_t s = -1;  // the lanes without a masked token form a group of their own that adds nothing
    double lr = 0.0;
    double w = 0.0;
    if (active) {
      s = p.segments[base + j];
      CUDA_KERNEL_ASSERT(s >= 0 && s < p.len);
      token_terms(p, base + j, lr, w);
    }
    const unsigned same = __match_any_sync(kFullMask, s);
    const int leader = __ffs(same) - 1;
    double lr_sum = 0.0;
    double w_sum = 0.0;
    if (same == kFullMask) {  // the whole chunk is one action (or padding): a fixed shuffle tree
      lr_sum = warp_sum(lr);
      w_sum = warp_sum(w);
    } else {  // the leader adds its action's lanes in lane order
      for (int src = 0; src < kWarp; ++src) {
        const double lr_src = __shfl_sync(kFullMask, lr, src);
        const double w_src = __shfl_sync(kFullMask, w, src);
        if (lane == leader && ((same >> src) & 1u)) {
          lr_sum += lr_src;
          w_sum += w_src;
        }
      }
    }
    if (lane == leader && s >= 0) {  // one leader per action and chunk: no two lanes write one slot
      acc[2 * s] += lr_sum;
      acc[2 * s + 1] += w_sum;
    }
    __syncwarp();  // the next chunk's leader of an action may be another lane
  }
  for (int64_t j = lane; j < p.len; j += kWarp) {
    const int64_t k = base + j;
    const bool active = p.mask[k] != 0;
    const int64_t s = active ? p.segments[k] : 0;
    write_token(p, k, active ? formulas::action_ratio(acc[2 * s], acc[2 * s + 1]) : 1.0);
  }
}

// Warps stride over the rows (one pass when the grid covers them all; the global-scratch launch is capped).
template <typename scalar_t>
__global__ void per_action_loss_kernel(LossArgs<scalar_t> p) {
  extern __shared__ double shared_acc[];
  const int64_t warp = thread_index() / kWarp;  // the same for every lane of a warp
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  double* acc = p.scratch != nullptr ? p.scratch + warp * 2 * p.len : shared_acc + (threadIdx.x / kWarp) * 2 * p.len;
  for (int64_t row = warp; row < p.rows; row += warps) {
    if (p.segments == nullptr) {
      sequence_row(p, row, lane);
    } else {
      segmented_row(p, row, lane, acc);
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> per_action_clipped_loss_cuda(
    const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& advantages, const at::Tensor& mask,
    const std::optional<at::Tensor>& segment_ids, double clip_low, double clip_high) {
  check_loss_args(logp, old_logp, advantages, mask, segment_ids, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(logp.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor lp = logp.contiguous();
  const at::Tensor old = old_logp.contiguous();
  const at::Tensor adv = advantages.contiguous();
  const at::Tensor m = mask.contiguous();
  const at::Tensor seg = segment_ids.has_value() ? segment_ids->contiguous() : at::Tensor();
  at::Tensor loss = at::empty_like(lp);
  at::Tensor ratio = at::empty_like(lp);
  at::Tensor dloss = at::empty_like(lp);
  const int64_t rows = lp.size(0);
  const int64_t len = lp.size(1);
  if (rows == 0 || len == 0) return {loss, ratio, dloss};

  // Shared memory for the per-action sums when a block's warps fit in it, else global scratch.
  const size_t per_warp = seg.defined() ? 2 * static_cast<size_t>(len) * sizeof(double) : 0;
  const bool in_shared = per_warp <= kSharedBytes;
  const int warps = !seg.defined() || !in_shared
                        ? kWarpsPerBlock
                        : static_cast<int>(std::min<size_t>(kWarpsPerBlock, kSharedBytes / per_warp));
  const size_t shared = in_shared ? per_warp * warps : 0;
  unsigned int blocks = blocks_for(rows * kWarp, warps * kWarp);
  at::Tensor scratch_sums;
  if (!in_shared) {
    const int64_t in_flight = std::max<int64_t>(warps, std::min<int64_t>(kScratchWarps, kScratchBytes / per_warp));
    blocks = std::min<unsigned int>(blocks, static_cast<unsigned int>(in_flight / warps));
    scratch_sums = at::empty({static_cast<int64_t>(blocks) * warps * 2 * len}, lp.options().dtype(at::kDouble));
  }
  AT_DISPATCH_FLOATING_TYPES(lp.scalar_type(), "per_action_clipped_loss", [&] {
    LossArgs<scalar_t> p{lp.data_ptr<scalar_t>(),
                         old.data_ptr<scalar_t>(),
                         adv.data_ptr<scalar_t>(),
                         m.data_ptr<scalar_t>(),
                         seg.defined() ? seg.data_ptr<int64_t>() : nullptr,
                         rows,
                         len,
                         clip_low,
                         clip_high,
                         scratch_sums.defined() ? scratch_sums.data_ptr<double>() : nullptr,
                         loss.data_ptr<scalar_t>(),
                         ratio.data_ptr<scalar_t>(),
                         dloss.data_ptr<scalar_t>()};
    per_action_loss_kernel<scalar_t><<<blocks, warps * kWarp, shared, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {loss, ratio, dloss};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyagentrl, CUDA, m) { m.impl("per_action_clipped_loss", &per_action_clipped_loss_cuda); }

}  // namespace pyagentrl::cuda
