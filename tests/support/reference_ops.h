// The fixture of the reference backend's op tests (backend/reference/): a backend, fp64 random
// tensors, zeros and int32 ids. One class for every file, since gtest requires a suite's tests
// to share their fixture's type.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "gemmax/backend/reference/reference_backend.h"
#include "test_util.h"

namespace gemmax::testing {

class ReferenceOps : public ::testing::Test {
 protected:
  ReferenceBackend be;
  Rng rng{42};
  Tensor rand(const Shape& s, double scale = 1.0) { return random_tensor(s, rng, scale); }
  Tensor zeros(const Shape& s, DType t = DType::F64) { return Tensor::zeros(s, t); }
  Tensor ints(const std::vector<int32_t>& v) { return int32_tensor(v); }
};

}  // namespace gemmax::testing
