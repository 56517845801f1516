// Per-action importance ratio and clipped PPO loss per token (GSPO-token construction, see
// docs/algorithms.md (L1)-(L3)). Every token of one action segment shares the ratio
//   s = exp(sum_j m_j (logp_j - old_j) / max(sum_j m_j, 1)),
// and the surrogate ratio of token j has value s and gradient s * d(logp_j), so the token's loss
//   l_j = max(-A_j s, -A_j clip(s, 1 - clip_low, 1 + clip_high))
// has d l_j / d logp_j = -A_j s where the unclipped term is the max, else 0 (csrc/formulas.h). Rows are
// independent, so they run in parallel.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "checks.h"
#include "formulas.h"

namespace pyagentrl {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> per_action_clipped_loss_cpu(
    const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& advantages, const at::Tensor& mask,
    const std::optional<at::Tensor>& segment_ids, double clip_low, double clip_high) {
  check_loss_args(logp, old_logp, advantages, mask, segment_ids, c10::DeviceType::CPU);
  const int64_t rows = logp.size(0);
  const int64_t len = logp.size(1);
  const at::Tensor lp = logp.contiguous();
  const at::Tensor old = old_logp.contiguous();
  const at::Tensor adv = advantages.contiguous();
  const at::Tensor m = mask.contiguous();
  const at::Tensor seg = segment_ids.has_value() ? segment_ids->contiguous() : at::Tensor();
  at::Tensor loss = at::empty_like(lp);
  at::Tensor ratio = at::empty_like(lp);
  at::Tensor dloss = at::empty_like(lp);

  AT_DISPATCH_FLOATING_TYPES(lp.scalar_type(), "per_action_clipped_loss", [&] {
    const scalar_t* lpp = lp.data_ptr<scalar_t>();
    const scalar_t* oldp = old.data_ptr<scalar_t>();
    const scalar_t* advp = adv.data_ptr<scalar_t>();
    const scalar_t* mp = m.data_ptr<scalar_t>();
    const int64_t* segp = seg.defined() ? seg.data_ptr<int64_t>() : nullptr;
    scalar_t* lossp = loss.data_ptr<scalar_t>();
    scalar_t* ratiop = ratio.data_ptr<scalar_t>();
    scalar_t* dp = dloss.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(len, 1));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      // A row holds at most `len` segments; ids index these per-row accumulators directly.
      std::vector<double> log_sum(len, 0.0);
      std::vector<double> weight(len, 0.0);
      for (int64_t b = begin; b < end; ++b) {
        const int64_t base = b * len;
        for (int64_t j = 0; j < len; ++j) {
          if (mp[base + j] == 0) continue;
          const int64_t s = segp ? segp[base + j] : 0;
          TORCH_CHECK_VALUE(s >= 0 && s < len, "segment_ids[", b, ", ", j, "] = ", s, " is outside [0, ", len, ")");
          log_sum[s] += static_cast<double>(mp[base + j]) * (static_cast<double>(lpp[base + j]) - oldp[base + j]);
          weight[s] += static_cast<double>(mp[base + j]);
        }
        for (int64_t j = 0; j < len; ++j) {
          const int64_t k = base + j;
          if (mp[k] == 0) {
            lossp[k] = 0;
            ratiop[k] = 1;
            dp[k] = 0;
            continue;
          }
          const int64_t s = segp ? segp[k] : 0;
          const double r = formulas::action_ratio(log_sum[s], weight[s]);
          const formulas::TokenLoss t = formulas::clipped_token(static_cast<double>(advp[k]), r, clip_low, clip_high);
          lossp[k] = static_cast<scalar_t>(t.loss);
          ratiop[k] = static_cast<scalar_t>(r);
          dp[k] = static_cast<scalar_t>(t.dloss_dlogp);
        }
        for (int64_t j = 0; j < len; ++j) {  // reset only what this row touched
          if (mp[base + j] == 0) continue;
          const int64_t s = segp ? segp[base + j] : 0;
          log_sum[s] = 0.0;
          weight[s] = 0.0;
        }
      }
    });
  });
  return {loss, ratio, dloss};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyagentrl, CPU, m) { m.impl("per_action_clipped_loss", &per_action_clipped_loss_cpu); }

}  // namespace pyagentrl
