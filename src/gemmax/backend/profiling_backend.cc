#include "gemmax/backend/profiling_backend.h"

#include <algorithm>

namespace gemmax {

const char* op_family_name(OpFamily f) {
  switch (f) {
    case OpFamily::Matmul:
      return "matmul";
    case OpFamily::GroupedMatmul:
      return "grouped matmul";
    case OpFamily::Attention:
      return "attention";
    case OpFamily::NormsElementwise:
      return "norms and elementwise";
    case OpFamily::RoutingPermute:
      return "routing and permute/combine";
    case OpFamily::HeadLoss:
      return "head and loss";
    case OpFamily::Optimizer:
      return "optimizer";
    case OpFamily::kCount:
      break;
  }
  return "?";
}

double OpProfile::total_seconds() const {
  double s = 0;
  for (double x : seconds) s += x;
  return s;
}

double OpProfile::total_flops() const {
  double s = 0;
  for (double x : flops) s += x;
  return s;
}

double ProfilingBackend::flops(const MatmulArgs& a, NoDims) {
  return 2.0 * double(a.c.numel()) * double(a.trans_a ? a.a.dim(0) : a.a.dim(1));
}

double ProfilingBackend::attention_flops(const AttentionShape& s, int products) {
  double pairs = 0;  // visible keys summed over queries
  for (int64_t i = 0; i < s.seq; ++i)
    pairs += double(s.window > 0 ? std::min<int64_t>(i + 1, s.window) : i + 1);
  return 2.0 * double(products) * pairs * double(s.head_dim) * double(s.batch * s.num_heads);
}

}  // namespace gemmax
