// Argument checks of the ops, shared by the CPU kernels (device type CPU) and the CUDA kernels (CUDA). The Python
// API validates first and gives the friendlier message; these keep the kernels memory-safe when called directly
// through torch.ops.pyagentrl.*. They read shapes and dtypes only, never values on the device.
#pragma once
#include <ATen/ATen.h>

#include <optional>
#include <utility>

namespace pyagentrl {

// The op's first tensor: on a device of type `type`, 1-D.
inline void check_1d_on(const at::Tensor& t, const char* name, c10::DeviceType type) {
  TORCH_CHECK_VALUE(t.device().type() == type, name, " must be a ", c10::DeviceTypeName(type), " tensor, got ",
                    t.device());
  TORCH_CHECK_VALUE(t.dim() == 1, name, " must be 1-D, got shape ", t.sizes());
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& first) {
  TORCH_CHECK_VALUE(t.device() == first.device(), name, " is on ", t.device(), ", expected ", first.device());
}

inline void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, name,
                   " must be float32 or float64, got ", t.scalar_type());
}

// int64 ids with one entry per row of `first`, on its device.
inline void check_ids(const at::Tensor& ids, const char* name, const at::Tensor& first) {
  check_1d_on(ids, name, first.device().type());
  check_same_device(ids, name, first);
  TORCH_CHECK_TYPE(ids.scalar_type() == at::kLong, name, " must be int64, got ", ids.scalar_type());
  TORCH_CHECK_VALUE(ids.numel() == first.numel(), name, " has ", ids.numel(), " rows, expected ", first.numel());
}

// The largest id range (num_groups, num_trajs) an op accepts: 2^40 ids, an 8 TiB table of counts, more than any
// machine holds. Refusing more keeps every size computed from it (num + 1, num * 32 threads, bytes) far from
// int64 overflow and stops a careless bound (a hash passed as a count) before it allocates. pyagentrl/ops/_checks.py
// (MAX_IDS) states the same bound at the Python door.
constexpr int64_t kMaxIds = int64_t{1} << 40;

inline void check_num_ids(int64_t num, const char* name) {
  TORCH_CHECK_VALUE(num >= 0 && num <= kMaxIds, name, " must be in [0, 2^40], got ", num);
}

// Reads id i and checks it lies in [0, bound) by comparisons only (no arithmetic on the id, so no value can
// overflow past the check). CPU kernels; the CUDA kernels assert the same comparison on the device.
inline int64_t checked_id(const int64_t* ids, int64_t i, int64_t bound, const char* name) {
  const int64_t id = ids[i];
  TORCH_CHECK_VALUE(id >= 0 && id < bound, name, "[", i, "] = ", id, " is outside [0, ", bound, ")");
  return id;
}

// ---- the arguments of each op family -------------------------------------------------------------------------

inline void check_grouped_args(const at::Tensor& values, const at::Tensor& group_ids, int64_t num_groups,
                               c10::DeviceType type) {
  check_1d_on(values, "values", type);
  check_floating(values, "values");
  check_ids(group_ids, "group_ids", values);
  check_num_ids(num_groups, "num_groups");
}

inline void check_pair_args(const at::Tensor& a, const at::Tensor& b, c10::DeviceType type) {
  check_1d_on(a, "a", type);
  TORCH_CHECK_TYPE(a.scalar_type() == at::kLong, "a must be int64, got ", a.scalar_type());
  check_ids(b, "b", a);
}

inline void check_trajectory_args(const at::Tensor& rewards, const std::optional<at::Tensor>& values,
                                  const at::Tensor& traj_ids, const at::Tensor& step_ids, int64_t num_trajs,
                                  c10::DeviceType type) {
  check_1d_on(rewards, "rewards", type);
  check_floating(rewards, "rewards");
  check_ids(traj_ids, "traj_ids", rewards);
  check_ids(step_ids, "step_ids", rewards);
  check_num_ids(num_trajs, "num_trajs");
  if (values.has_value()) {
    check_1d_on(*values, "values", type);
    check_same_device(*values, "values", rewards);
    TORCH_CHECK_TYPE(values->scalar_type() == rewards.scalar_type(), "values must have the dtype of rewards (",
                     rewards.scalar_type(), "), got ", values->scalar_type());
    TORCH_CHECK_VALUE(values->numel() == rewards.numel(), "values has ", values->numel(), " rows, expected ",
                      rewards.numel());
  }
}

inline void check_loss_args(const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& advantages,
                            const at::Tensor& mask, const std::optional<at::Tensor>& segment_ids,
                            c10::DeviceType type) {
  TORCH_CHECK_VALUE(logp.device().type() == type, "logp must be a ", c10::DeviceTypeName(type), " tensor, got ",
                    logp.device());
  TORCH_CHECK_VALUE(logp.dim() == 2, "logp must be [batch, tokens], got shape ", logp.sizes());
  check_floating(logp, "logp");
  const auto same_shape = [&](const at::Tensor& t, const char* name) {
    TORCH_CHECK_VALUE(t.device().type() == type, name, " must be a ", c10::DeviceTypeName(type), " tensor, got ",
                      t.device());
    check_same_device(t, name, logp);
    TORCH_CHECK_VALUE(t.sizes() == logp.sizes(), name, " has shape ", t.sizes(), ", expected ", logp.sizes());
  };
  for (const auto& [t, name] : {std::pair{old_logp, "old_logp"}, {advantages, "advantages"}, {mask, "mask"}}) {
    same_shape(t, name);
    TORCH_CHECK_TYPE(t.scalar_type() == logp.scalar_type(), name, " must have the dtype of logp (",
                     logp.scalar_type(), "), got ", t.scalar_type());
  }
  if (segment_ids.has_value()) {
    same_shape(*segment_ids, "segment_ids");
    TORCH_CHECK_TYPE(segment_ids->scalar_type() == at::kLong, "segment_ids must be int64, got ",
                     segment_ids->scalar_type());
  }
}

}  // namespace pyagentrl
