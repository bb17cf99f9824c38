// The cuda backend's own properties, on the host (cuda_emulated, with and without the tensor-core
// kernels), which is how machines without a GPU check them, and on the GPU (cuda, fast and simple),
// whose runs skip with a one-line reason where no device is present: its fp64 sums are repeatable
// bit for bit, and a bfloat16 op that falls back to the plain kernels says so. Every op against the
// reference is the conformance suite (op_conformance.h), which runs every backend.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/base/convert.h"
#include "test_util.h"

namespace gemmax {
namespace {

class CudaBackend : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string p = GetParam();
    BackendOptions o;
    o.name = p.rfind("gpu", 0) == 0 ? "cuda" : "cuda_emulated";
    o.cuda_kernels = p.find("simple") != std::string::npos ? CudaKernels::Simple : CudaKernels::Fast;
    // bench/gpu_check.sh runs the GPU tests with every launch checked, naming a faulting kernel.
    o.cuda_sync_check = std::getenv("GEMMAX_TEST_CUDA_SYNC_CHECK") != nullptr;
    if (o.name == "cuda") {
      std::string why;
      if (!cuda::cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    }
    be = make_backend(o);
  }

  // Random values on the bf16 grid, on the device.
  Tensor rand(const Shape& s, DType dt) {
    return be->to_device(testing::random_bf16_grid(s, rng, 1.0, dt), MemKind::Workspace);
  }
  Tensor ints(const std::vector<int32_t>& v) {
    return be->to_device(testing::int32_tensor(v), MemKind::Workspace);
  }

  std::unique_ptr<Backend> be;
  Rng rng{11};
};

// The ordered fp64 sum of squares gives the same bits for the same input (its agreement with the
// reference is the conformance case SumSquaresAndScaledSum).
TEST_P(CudaBackend, OrderedSumsAreRepeatable) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor x = rand({100003}, dt);
    double sums[2];
    for (double& sum : sums) {
      Tensor acc = be->zeros({1}, DType::F64, MemKind::Workspace);
      be->sum_squares({.sum = acc, .x = x});
      sum = get_as_double(convert_dtype(be->to_host(acc), DType::F64), 0);
    }
    EXPECT_EQ(sums[0], sums[1]) << dtype_name(dt);
    EXPECT_GT(sums[0], 0.0);
  }
}

// A bfloat16 op that falls back to the plain kernels says so in one line, once per op and shape
// class: a run that is 20-50x slower than it should be names why.
TEST_P(CudaBackend, SlowFallbackIsAnnouncedOncePerOpAndShapeClass) {
  const bool simple = std::string(GetParam()).find("simple") != std::string::npos;
  auto gmm_of_width = [&](int64_t k) {
    const Tensor lhs = rand({5, k}, DType::BF16);
    const Tensor rhs = rand({1, 8, k}, DType::BF16);
    const Tensor sizes = ints({5});
    Tensor out = be->alloc({5, 8}, DType::BF16, MemKind::Workspace);
    be->gmm({.out = out, .lhs = lhs, .rhs = rhs, .group_sizes = sizes});
    be->to_host(out);
  };
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  ::testing::internal::CaptureStderr();
  gmm_of_width(12);
  gmm_of_width(12);
  gmm_of_width(20);
  gmm_of_width(16);  // the tensor-core kernels apply: nothing to say
  const std::string said = ::testing::internal::GetCapturedStderr();
  if (simple) {
    EXPECT_EQ(count(said, "gmm runs the plain kernels (20-50x slower): cuda_kernels=simple"), 1)
        << said;
    EXPECT_EQ(count(said, "runs the plain kernels"), 1) << said;
  } else {
    EXPECT_EQ(count(said, "gmm [k=12, n=8] runs the plain kernels (20-50x slower): the "
                          "tensor-core kernels need k and n multiples of 8"),
              1)
        << said;
    EXPECT_EQ(count(said, "gmm [k=20, n=8] runs the plain kernels"), 1) << said;
    EXPECT_EQ(count(said, "runs the plain kernels"), 2) << said;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaBackend,
                         ::testing::Values("emulated", "emulated_simple", "gpu", "gpu_simple"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace gemmax
