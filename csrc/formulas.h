// The per-element math of every op, in one place for the CPU kernels (csrc/cpu) and the CUDA kernels
// (csrc/cuda): both include this header, so the CPU tests exercise the formulas the GPU runs. The kernels
// differ only in how they visit rows (a loop, or threads over a stable order); labels such as (S3) are the
// equations of docs/algorithms.md.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PYAGENTRL_HD __host__ __device__ __forceinline__
#else
#define PYAGENTRL_HD inline
#endif

namespace pyagentrl::formulas {

// ---- grouped statistics (S1)-(S5) ----------------------------------------------------------------------------

// A running sum with Neumaier's compensation (the low-order bits each addition loses), plus the range of
// what was added: a group whose values are all equal is recognised exactly, whatever the rounding.
struct Moments {
  double sum = 0.0;
  double comp = 0.0;
  double lo = INFINITY;
  double hi = -INFINITY;
  int64_t count = 0;
};

PYAGENTRL_HD void compensated_add(double& sum, double& comp, double v) {
  const double t = sum + v;
  comp += fabs(sum) >= fabs(v) ? (sum - t) + v : (v - t) + sum;
  sum = t;
}

PYAGENTRL_HD void add_value(Moments& m, double v) {
  compensated_add(m.sum, m.comp, v);
  m.lo = fmin(m.lo, v);
  m.hi = fmax(m.hi, v);
  m.count += 1;
}

// Combines two partial moments (tree reductions on the GPU); the order of merges is fixed by the caller.
PYAGENTRL_HD void merge(Moments& m, const Moments& other) {
  compensated_add(m.sum, m.comp, other.sum);
  compensated_add(m.sum, m.comp, other.comp);
  m.lo = fmin(m.lo, other.lo);
  m.hi = fmax(m.hi, other.hi);
  m.count += other.count;
}

PYAGENTRL_HD bool all_equal(const Moments& m) { return m.count > 0 && m.lo == m.hi; }

// (S1): an all-equal group's mean is its value itself, so its members centre to exactly 0; an empty group's is 0.
PYAGENTRL_HD double group_mean(const Moments& m) {
  if (m.count == 0) return 0.0;
  return all_equal(m) ? m.lo : (m.sum + m.comp) / static_cast<double>(m.count);
}

// (S2) from the sum of squared deviations around the final mean (two-pass variance); 0 for groups of fewer than
// two members and for all-equal groups.
PYAGENTRL_HD double group_std(double squared_deviations, const Moments& m, bool unbiased) {
  if (m.count < 2 || all_equal(m)) return 0.0;
  return sqrt(squared_deviations / static_cast<double>(m.count - (unbiased ? 1 : 0)));
}

// verl's singleton rule (singleton_raw): a lone member is compared with mean 0 and std 1, keeping its raw value.
PYAGENTRL_HD void singleton_as_raw(int64_t count, double& mean, double& std) {
  if (count == 1) {
    mean = 0.0;
    std = 1.0;
  }
}

// (S3)-(S5): (x - mean) / (std + eps), or x - mean without `scale`. centred == 0 covers all-equal groups
// exactly, also at eps = 0 (no 0/0).
PYAGENTRL_HD double normalized(double x, double mean, double std, bool scale, double eps) {
  const double centred = x - mean;
  return scale && centred != 0.0 ? centred / (std + eps) : centred;
}

// ---- pair factorisation (G6) ---------------------------------------------------------------------------------

// splitmix64's finaliser over the two keys: the hash-table slot of the pair (a, b).
PYAGENTRL_HD uint64_t mix_pair(int64_t a, int64_t b) {
  uint64_t z = static_cast<uint64_t>(a) * 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(b);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A table of at least twice as many slots as rows (a power of two): linear probing stays short.
PYAGENTRL_HD uint64_t pair_table_capacity(int64_t rows) {
  uint64_t capacity = 16;
  while (capacity < 2 * static_cast<uint64_t>(rows)) capacity <<= 1;
  return capacity;
}

// ---- trajectory recursions (G5), (V2)-(V3) -------------------------------------------------------------------

// One step of the backward recursion A_t = r_t + gamma V_{t+1} - V_t + gamma lam A_{t+1}; with V = 0 and
// lam = 1 it is the discounted return G_t = r_t + gamma G_{t+1}.
PYAGENTRL_HD double gae_step(double reward, double value, double next_value, double next_advantage, double gamma,
                             double gamma_lam) {
  return reward + gamma * next_value - value + gamma_lam * next_advantage;
}

// ---- per-action clipped loss (L1)-(L3) -----------------------------------------------------------------------

// exp() of an action's mean log-ratio is clamped like verl's, against overflow on stale samples.
constexpr double kMaxLogRatio = 20.0;

// (L1): s = exp(sum_j m_j (logp_j - old_j) / max(sum_j m_j, 1)) over the action's tokens.
PYAGENTRL_HD double action_ratio(double masked_log_ratio_sum, double mask_sum) {
  const double mean = masked_log_ratio_sum / fmax(mask_sum, 1.0);
  return exp(fmin(fmax(mean, -kMaxLogRatio), kMaxLogRatio));
}

struct TokenLoss {
  double loss;
  double dloss_dlogp;
};

// (L2)-(L3): l = max(-A s, -A clip(s, 1 - clip_low, 1 + clip_high)); the token's surrogate ratio has value s and
// gradient s d(logp), so dl/dlogp = -A s where the unclipped term is the max, else 0.
PYAGENTRL_HD TokenLoss clipped_token(double advantage, double ratio, double clip_low, double clip_high) {
  const double unclipped = -advantage * ratio;
  const double clipped = -advantage * fmin(fmax(ratio, 1.0 - clip_low), 1.0 + clip_high);
  return {fmax(unclipped, clipped), unclipped >= clipped ? unclipped : 0.0};
}

}  // namespace pyagentrl::formulas
