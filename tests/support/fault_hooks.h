// TrainHooks that make a run fail on purpose, for the tests and the fault tests' driver.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "gemmax/train/step.h"
#include "gemmax/train/train_hooks.h"

namespace gemmax::testing {

// Sets the first element of registry entry `i`'s gradient to NaN, as a blow-up in the backward
// would, if this rank holds that element in the pass `replicated` (TrainHooks::after_backward).
inline void poison_gradient(Backend& be, const TrainState& state, size_t i, bool replicated) {
  const ParamPiece& p = state.layout.pieces[i];
  if (p.count > 0 && p.begin == 0 && p.replicated == replicated)
    be.fill({.x = state.grads.flat_slice(p.local, {1}),
             .value = std::numeric_limits<double>::quiet_NaN()});
}

// A NaN in the first element of parameter `name`'s gradient at updates first_t .. first_t +
// count - 1 (1-based).
inline TrainHooks nan_gradient(const std::string& name, int64_t first_t, int64_t count) {
  TrainHooks h;
  h.after_backward = [=](Backend& be, const ParamTable& table, const TrainState& state, int64_t t,
                         bool replicated) {
    if (t >= first_t && t < first_t + count)
      poison_gradient(be, state, size_t(&table.at(name) - table.specs().data()), replicated);
  };
  return h;
}

}  // namespace gemmax::testing
