// The ops' contracts (backend/ops/) are checked once, at the Backend entry point, before any
// backend runs: a planning run (no data) catches a wrong shape as the real run would, and the
// profiling decorator charges each op to the family its declaration names.
#include <gtest/gtest.h>

#include "gemmax/backend/planning_backend.h"
#include "gemmax/backend/profiling_backend.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;

TEST(OpContracts, AreCheckedBeforeAnyBackendRuns) {
  ReferenceBackend ref;
  PlanningBackend plan(ref);  // runs nothing: only the entry point's validate can object
  const Tensor a = plan.alloc({4, 8}, DType::F32, MemKind::Workspace);
  const Tensor b = plan.alloc({6, 5}, DType::F32, MemKind::Workspace);
  const Tensor c = plan.alloc({4, 5}, DType::F32, MemKind::Workspace);
  expect_error([&] { plan.matmul({.c = c, .a = a, .b = b}); }, {"matmul shapes", "[6, 5]"});
  const Tensor b_ok = plan.alloc({8, 5}, DType::F32, MemKind::Workspace);
  plan.matmul({.c = c, .a = a, .b = b_ok});  // a valid call passes

  // Swapped operands of a grouped matmul: lhs [m, k] given as the weights and back.
  const Tensor x = plan.alloc({4, 8}, DType::BF16, MemKind::Workspace);
  const Tensor w = plan.alloc({2, 5, 8}, DType::BF16, MemKind::Workspace);
  const Tensor y = plan.alloc({4, 5}, DType::BF16, MemKind::Workspace);
  const Tensor gs = plan.alloc({2}, DType::I32, MemKind::Workspace);
  expect_error([&] { plan.gmm({.out = y, .lhs = w, .rhs = x, .group_sizes = gs}); },
               {"gmm shapes"});
  expect_error([&] { plan.gmm({.out = y, .lhs = x, .rhs = w, .group_sizes = y}); },
               {"gmm: group_sizes must be int32 [2]"});
  const GmmRows window{.weight_begin = 3, .weight_rows = 4};
  expect_error([&] { plan.gmm({.out = y, .lhs = x, .rhs = w, .group_sizes = gs, .rows = window}); },
               {"gmm: weight rows [3, 7) of 5"});
  plan.gmm({.out = y, .lhs = x, .rhs = w, .group_sizes = gs});
}

TEST(OpContracts, ProfilingChargesEachOpToItsFamily) {
  ReferenceBackend ref;
  ProfilingBackend prof(ref);
  const Tensor a = prof.zeros({3, 4}, DType::F32, MemKind::Workspace);
  const Tensor b = prof.zeros({4, 5}, DType::F32, MemKind::Workspace);
  const Tensor c = prof.zeros({3, 5}, DType::F32, MemKind::Workspace);
  prof.reset();
  prof.matmul({.c = c, .a = a, .b = b});
  prof.scale({.x = c, .alpha = 2.0});
  const OpProfile& p = prof.profile();
  EXPECT_EQ(p.calls[size_t(OpFamily::Matmul)], 1);
  EXPECT_EQ(p.flops[size_t(OpFamily::Matmul)], 2.0 * 3 * 5 * 4);
  EXPECT_EQ(p.calls[size_t(OpFamily::NormsElementwise)], 1);
  EXPECT_EQ(p.flops[size_t(OpFamily::NormsElementwise)], 0.0);

  // Inside the output head every op is the head's, whatever the phase is called.
  prof.tracker().set_phase("a renamed head phase", StepPart::OutputHead);
  prof.matmul({.c = c, .a = a, .b = b});
  prof.tracker().set_phase("after the head");
  prof.matmul({.c = c, .a = a, .b = b});
  EXPECT_EQ(p.calls[size_t(OpFamily::HeadLoss)], 1);
  EXPECT_EQ(p.flops[size_t(OpFamily::HeadLoss)], 2.0 * 3 * 5 * 4);
  EXPECT_EQ(p.calls[size_t(OpFamily::Matmul)], 2);
}

}  // namespace
}  // namespace gemmax
