#include "gemmax/backend/ops/geglu.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {
namespace {

// h holds [gate | up] rows (up undefined), or the gate half beside up.
GegluDims check_rows(const Tensor& a, const Tensor& h, const Tensor& up, const char* op) {
  const int64_t F = a.dim(-1), m = F == 0 ? 0 : a.numel() / F;
  const bool split = up.defined();
  GEMMAX_CHECK(split ? h.numel() == m * F && up.numel() == m * F : h.numel() == 2 * m * F, op,
               ": h ", h.str(), split ? " up " + up.str() : std::string(), " for a ", a.str());
  return {m, F, split ? F : 2 * F, split};
}

}  // namespace

GegluDims validate(const GegluForwardArgs& args) {
  return check_rows(args.a, args.h, args.up, "geglu_forward");
}

GegluDims validate(const GegluBackwardArgs& args) {
  const auto& [dh, dup, da, h, up, round_gelu] = args;
  const GegluDims g = check_rows(da, h, up, "geglu_backward");
  const bool split = up.defined();
  GEMMAX_CHECK(split || (dh.defined() && dh.numel() == h.numel() && !dup.defined()),
               "geglu_backward: fused rows need dh ", op_check::str_or(dh, "(none)"),
               " shaped like h ", h.str());
  for (const Tensor* d : {&dh, &dup})
    GEMMAX_CHECK(!split || !d->defined() || d->numel() == da.numel(),
                 "geglu_backward: a gradient half ", d->str(), " for da ", da.str());
  return g;
}

}  // namespace gemmax
