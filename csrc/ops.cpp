// The pyagentrl operator library: every op is declared once here; csrc/cpu/*.cpp register the
// CPU kernels and csrc/cuda/*.cu the CUDA ones. pyagentrl/ops/_library.py adds the fake
// (meta) implementations for torch.compile and the autograd formula of the policy loss. The labels in
// parentheses, e.g. (S3), are the equations of docs/algorithms.md.
#include <Python.h>
#include <torch/library.h>

extern "C" {
// Importing pyagentrl._C loads this library, whose static initialisers register the ops.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(pyagentrl, m) {
  // Per-group count, mean and std of `values` (float32/64) under dense ids in [0, num_groups) (S1)-(S2).
  m.def("grouped_stats(Tensor values, Tensor group_ids, int num_groups, bool unbiased) -> (Tensor, Tensor, Tensor)");
  // (x - mean_g) / (std_g + eps), or x - mean_g when not `scale`; all-equal groups give exactly 0 (S3)-(S5).
  m.def(
      "group_normalize(Tensor values, Tensor group_ids, int num_groups, bool scale, bool unbiased, float eps, "
      "bool singleton_raw) -> Tensor");
  // Dense ids (first-appearance order) of the pairs (a_i, b_i), and how many distinct pairs there are (G6).
  m.def("factorize_pairs(Tensor a, Tensor b) -> (Tensor, Tensor)");
  // Backward recursion per trajectory: A_t = r_t + gamma V_{t+1} - V_t + gamma lam A_{t+1} (V2)-(V3).
  // Without values it is the discounted return G_t = r_t + gamma G_{t+1} (V = 0, lam = 1) (G5).
  m.def(
      "trajectory_gae(Tensor rewards, Tensor? values, Tensor traj_ids, Tensor step_ids, int num_trajs, "
      "float gamma, float lam) -> Tensor");
  // Per-action (segment) importance ratio and clipped PPO loss per token: returns
  // (token_loss, token_ratio, dloss_dlogp), the last being the GSPO-token gradient of the loss (L1)-(L3).
  m.def(
      "per_action_clipped_loss(Tensor logp, Tensor old_logp, Tensor advantages, Tensor mask, "
      "Tensor? segment_ids, float clip_low, float clip_high) -> (Tensor, Tensor, Tensor)");
}
