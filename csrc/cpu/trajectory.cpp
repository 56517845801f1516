// Backward recursions along trajectories whose rows may arrive in any order: discounted returns
// (GiGPO Eq. 5, docs/algorithms.md (G5)) and the GAE-style recursion over a value proxy (GAGPO,
// docs/algorithms.md (V2)-(V3)). Linear time: rows are
// bucketed by (trajectory, step) into one permutation, then each trajectory is scanned backwards.
#include <torch/library.h>

#include <optional>
#include <vector>

#include "checks.h"
#include "formulas.h"

namespace pyagentrl {
namespace {

// The rule every step-id message ends with; pyagentrl/ops/returns.py words the reference path's messages the same.
constexpr const char* kContiguousSteps = "step_ids of each trajectory must be 0..n-1, each exactly once";

// Row order that lists every trajectory's rows by step. Requires each trajectory's step ids to be
// exactly 0..n-1, so the bucket of row i is offset[traj] + step and no sort is needed.
struct TrajectoryOrder {
  std::vector<int64_t> offset;  // num_trajs + 1 entries
  std::vector<int64_t> rows;    // rows[offset[t] + s] = row of step s of trajectory t
};

// Every step id is compared with its trajectory's row count before it is used: a step id is any int64 (near
// 2^63, step + 1 or offset + step would overflow), and only 0 <= step < count keeps offset + step inside the
// trajectory's own bucket. n rows in n slots with no slot taken twice then means each trajectory has 0..n-1.
// The messages print only ids and row numbers read from the inputs and from `rows` itself.
TrajectoryOrder order_by_step(const int64_t* traj, const int64_t* step, int64_t n, int64_t num_trajs) {
  std::vector<int64_t> count(num_trajs, 0);
  for (int64_t i = 0; i < n; ++i) count[checked_id(traj, i, num_trajs, "traj_ids")] += 1;
  TrajectoryOrder order;
  order.offset.assign(num_trajs + 1, 0);
  for (int64_t t = 0; t < num_trajs; ++t) order.offset[t + 1] = order.offset[t] + count[t];
  order.rows.assign(n, -1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = traj[i];
    const int64_t s = step[i];
    TORCH_CHECK_VALUE(s >= 0 && s < count[t], "step_ids[", i, "] = ", s, " is outside [0, ", count[t],
                      ") (trajectory ", t, " has ", count[t], " rows): ", kContiguousSteps);
    int64_t& slot = order.rows[order.offset[t] + s];
    TORCH_CHECK_VALUE(slot < 0, "step_ids: trajectory ", t, " has step ", s, " twice (rows ", slot, " and ", i,
                      "): ", kContiguousSteps);
    slot = i;
  }
  return order;
}

at::Tensor trajectory_gae_cpu(const at::Tensor& rewards, const std::optional<at::Tensor>& values,
                              const at::Tensor& traj_ids, const at::Tensor& step_ids, int64_t num_trajs, double gamma,
                              double lam) {
  check_trajectory_args(rewards, values, traj_ids, step_ids, num_trajs, c10::DeviceType::CPU);
  const int64_t n = rewards.numel();
  const at::Tensor r = rewards.contiguous();
  const at::Tensor v = values.has_value() ? values->contiguous() : at::Tensor();
  const at::Tensor traj = traj_ids.contiguous();
  const at::Tensor step = step_ids.contiguous();
  const TrajectoryOrder order = order_by_step(traj.data_ptr<int64_t>(), step.data_ptr<int64_t>(), n, num_trajs);
  at::Tensor out = at::empty_like(r);
  AT_DISPATCH_FLOATING_TYPES(r.scalar_type(), "trajectory_gae", [&] {
    const scalar_t* rp = r.data_ptr<scalar_t>();
    const scalar_t* vp = v.defined() ? v.data_ptr<scalar_t>() : nullptr;
    scalar_t* op = out.data_ptr<scalar_t>();
    const double decay = gamma * lam;
    for (int64_t t = 0; t < num_trajs; ++t) {
      double advantage = 0.0;   // A_{t+1}; zero past the last step
      double next_value = 0.0;  // V(s_{t+1}); the state after the last step is terminal
      for (int64_t pos = order.offset[t + 1] - 1; pos >= order.offset[t]; --pos) {
        const int64_t i = order.rows[pos];
        const double value = vp ? static_cast<double>(vp[i]) : 0.0;
        advantage = formulas::gae_step(static_cast<double>(rp[i]), value, next_value, advantage, gamma, decay);
        op[i] = static_cast<scalar_t>(advantage);
        next_value = value;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyagentrl, CPU, m) { m.impl("trajectory_gae", &trajectory_gae_cpu); }

}  // namespace pyagentrl
