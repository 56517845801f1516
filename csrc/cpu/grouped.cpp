// Grouped statistics, group normalisation and pair factorisation on CPU (docs/algorithms.md (S1)-(S5), (G6)).
// Statistics accumulate in double with a compensated (Neumaier) sum and a two-pass variance; a group
// whose values are all equal gets its mean equal to that value and std exactly 0, so its members
// normalise to exactly 0 (the float32 reference gives +-0.3..0.5 there, see docs/algorithms.md (S4), (D5)).
// The formulas are csrc/formulas.h's, shared with the CUDA kernels.
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

#include "checks.h"
#include "formulas.h"

namespace pyagentrl {
namespace {

struct GroupMoments {
  std::vector<int64_t> count;
  std::vector<double> mean;
  std::vector<double> std;
};

template <typename scalar_t>
GroupMoments group_moments(const scalar_t* x, const int64_t* ids, int64_t n, int64_t num_groups, bool unbiased) {
  std::vector<formulas::Moments> moments(num_groups);
  for (int64_t i = 0; i < n; ++i) {
    formulas::add_value(moments[checked_id(ids, i, num_groups, "group_ids")], static_cast<double>(x[i]));
  }
  GroupMoments m;
  m.count.resize(num_groups);
  m.mean.resize(num_groups);
  m.std.assign(num_groups, 0.0);
  for (int64_t g = 0; g < num_groups; ++g) {
    m.count[g] = moments[g].count;
    m.mean[g] = formulas::group_mean(moments[g]);
  }
  // Two-pass variance around the final mean; the squared deviations accumulate in m.std.
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - m.mean[ids[i]];
    m.std[ids[i]] += d * d;
  }
  for (int64_t g = 0; g < num_groups; ++g) m.std[g] = formulas::group_std(m.std[g], moments[g], unbiased);
  return m;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> grouped_stats_cpu(const at::Tensor& values, const at::Tensor& group_ids,
                                                                 int64_t num_groups, bool unbiased) {
  check_grouped_args(values, group_ids, num_groups, c10::DeviceType::CPU);
  const at::Tensor x = values.contiguous();
  const at::Tensor ids = group_ids.contiguous();
  at::Tensor count = at::empty({num_groups}, ids.options());
  at::Tensor mean = at::empty({num_groups}, x.options());
  at::Tensor std = at::empty({num_groups}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "grouped_stats", [&] {
    const GroupMoments m = group_moments(x.data_ptr<scalar_t>(), ids.data_ptr<int64_t>(), x.numel(), num_groups, unbiased);
    auto* c = count.data_ptr<int64_t>();
    auto* mu = mean.data_ptr<scalar_t>();
    auto* sd = std.data_ptr<scalar_t>();
    for (int64_t g = 0; g < num_groups; ++g) {
      c[g] = m.count[g];
      mu[g] = static_cast<scalar_t>(m.mean[g]);
      sd[g] = static_cast<scalar_t>(m.std[g]);
    }
  });
  return {count, mean, std};
}

at::Tensor group_normalize_cpu(const at::Tensor& values, const at::Tensor& group_ids, int64_t num_groups, bool scale,
                               bool unbiased, double eps, bool singleton_raw) {
  check_grouped_args(values, group_ids, num_groups, c10::DeviceType::CPU);
  const at::Tensor x = values.contiguous();
  const at::Tensor ids = group_ids.contiguous();
  at::Tensor out = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "group_normalize", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const int64_t* gp = ids.data_ptr<int64_t>();
    GroupMoments m = group_moments(xp, gp, x.numel(), num_groups, unbiased);
    if (singleton_raw) {
      for (int64_t g = 0; g < num_groups; ++g) formulas::singleton_as_raw(m.count[g], m.mean[g], m.std[g]);
    }
    scalar_t* op = out.data_ptr<scalar_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t g = gp[i];
      op[i] = static_cast<scalar_t>(formulas::normalized(static_cast<double>(xp[i]), m.mean[g], m.std[g], scale, eps));
    }
  });
  return out;
}

// Open addressing with linear probing. A slot holds only the row where its pair first appeared: the
// pair is read back from the inputs and its label from the output, so the table costs 8 bytes a slot.
std::tuple<at::Tensor, at::Tensor> factorize_pairs_cpu(const at::Tensor& a, const at::Tensor& b) {
  check_pair_args(a, b, c10::DeviceType::CPU);
  const at::Tensor ac = a.contiguous();
  const at::Tensor bc = b.contiguous();
  const int64_t n = ac.numel();
  const uint64_t capacity = formulas::pair_table_capacity(n);
  const uint64_t mask = capacity - 1;
  constexpr int64_t kEmpty = -1;
  std::vector<int64_t> first_row(capacity, kEmpty);
  at::Tensor out = at::empty({n}, ac.options());
  const int64_t* ap = ac.data_ptr<int64_t>();
  const int64_t* bp = bc.data_ptr<int64_t>();
  int64_t* op = out.data_ptr<int64_t>();
  int64_t next = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = formulas::mix_pair(ap[i], bp[i]) & mask;
    int64_t r;
    while ((r = first_row[h]) != kEmpty && (ap[r] != ap[i] || bp[r] != bp[i])) h = (h + 1) & mask;
    if (r == kEmpty) {
      first_row[h] = i;
      op[i] = next++;
    } else {
      op[i] = op[r];
    }
  }
  return {out, at::scalar_tensor(next, ac.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyagentrl, CPU, m) {
  m.impl("grouped_stats", &grouped_stats_cpu);
  m.impl("group_normalize", &group_normalize_cpu);
  m.impl("factorize_pairs", &factorize_pairs_cpu);
}

}  // namespace pyagentrl
