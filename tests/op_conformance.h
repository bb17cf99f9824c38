// The op conformance suite: one table of cases, every backend tested against it (reference, cpu
// with each kernel family, the cuda kernels on the host and on a GPU).
//
// A case runs ops on the backend under test and, on the same inputs, on the reference backend in
// fp64: the ground truth. Inputs are drawn on the bfloat16 grid, so that every dtype holds them
// exactly and the fp64 run sees the very numbers the tested dtype does. Each output is compared
// with its criterion (Harness::expect_near, expect_exact): float32 results within 1e-5 of the
// largest true value, bfloat16 results within 2^-7 of it (one or two roundings), unless a case says
// otherwise. Where a bfloat16 op rounds an intermediate by its contract (a + b before the
// layer_scalar's product, the capped logits, RMSNorm's rounding before the scale), the case widens
// its bfloat16 criterion by those roundings, and says so.
//
// Cases are registered by name (CONFORMANCE_CASE): each is a test per backend (ctest lists
// Backends/OpConformance.<Case>/<backend>), and OpConformanceTable.EveryOpHasACase runs them all
// on a recording backend and fails naming any op of backend/ops/op_list.h that no case calls.
// A backend that cannot run here (a kernel family this CPU lacks, no GPU) skips, saying why.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_options.h"
#include "gemmax/base/rng.h"

namespace gemmax::conformance {

// A backend under test, as a run's configuration builds it.
struct Target {
  std::string name;  // the test name's suffix: reference, cpu_avx2, cuda_emulated, ...
  BackendOptions options;
};
void PrintTo(const Target& target, std::ostream* os);
std::vector<Target> all_targets();

// Forwards every op to another backend through its public entry points, noting each op's name.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const std::set<std::string>& called() const { return called_; }

  std::string name() const override { return inner_->name(); }
  std::string describe() const override { return inner_->describe(); }
  MemoryTracker& tracker() override { return inner_->tracker(); }
  int64_t persistent_bytes() const override { return inner_->persistent_bytes(); }
  void synchronize() override { inner_->synchronize(); }
  Tensor alloc(const Shape& shape, DType dtype, MemKind kind) override {
    return inner_->alloc(shape, dtype, kind);
  }
  void upload(const Tensor& dst, const Tensor& host) override { inner_->upload(dst, host); }
  Tensor to_host(const Tensor& t) override { return inner_->to_host(t); }

 protected:
#define GEMMAX_OP_RECORDED(op, Args, family)              \
  void do_##op(const Args& args, OpDims<Args>) override { \
    called_.insert(#op);                                  \
    inner_->op(args);                                     \
  }
  GEMMAX_BACKEND_OPS(GEMMAX_OP_RECORDED)
#undef GEMMAX_OP_RECORDED

 private:
  std::unique_ptr<Backend> inner_;
  std::set<std::string> called_;
};

using Tensors = std::vector<Tensor>;
using OpCalls = std::function<void(Backend&, const Tensors&)>;

class Harness {
 public:
  // `target`: the Target's name (all_targets), or the backend's name.
  explicit Harness(std::unique_ptr<Backend> under_test, std::string target = "");

  Backend& be() { return be_; }
  const std::string& target() const { return target_; }
  // The cuda kernels run on the host: many times slower than a GPU, so that a few long cases run
  // on the GPU only.
  bool emulated() const { return be_.name() == "cuda_emulated"; }
  const std::set<std::string>& ops_called() const { return be_.called(); }
  // The dtypes every case runs in.
  static std::vector<DType> dtypes() { return {DType::F32, DType::BF16}; }

  // Random values on the bfloat16 grid, in dtype dt.
  Tensor rand(const Shape& shape, DType dt = DType::F32, double scale = 1.0);
  static Tensor ints(const std::vector<int32_t>& values);
  static Tensor zeros(const Shape& shape, DType dt = DType::F32);
  Rng& rng() { return rng_; }

  struct Outputs {
    Tensors got;    // the backend under test's tensors after the calls, on the host
    Tensors truth;  // the reference's in fp64 (floating tensors widened to float64)
  };
  // Runs `calls` on the backend under test, on device copies of `tensors`, and on the reference
  // backend, on fp64 copies of them.
  Outputs run(const Tensors& tensors, const OpCalls& calls);

  // |got - truth| <= rtol * max|truth| + atol + elem_rtol * |truth|, element by element.
  static void expect_near(const std::string& what, const Tensor& got, const Tensor& truth,
                          double rtol, double atol = 0, double elem_rtol = 0);
  // got == truth rounded once to got's dtype, element by element.
  static void expect_exact(const std::string& what, const Tensor& got, const Tensor& truth);
  static double tol(DType dt) { return dt == DType::BF16 ? 1.0 / 128 : 1e-5; }

 private:
  RecordingBackend be_;
  std::string target_;
  std::unique_ptr<Backend> truth_;
  Rng rng_{11};
};

// The registered cases, in registration order.
using CaseFn = void (*)(Harness&);
struct Case {
  const char* name;
  CaseFn run;
};
std::vector<Case>& cases();
bool add_case(const char* name, CaseFn run);
// Runs the case registered as `name` (cases of several files; a backend's own tests reuse them).
void run_case(const char* name, Harness& h);

class OpConformance : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override;
  std::unique_ptr<Harness> h;
};

// CONFORMANCE_CASE(Name) { ... uses h ... }: a test per backend, and a case of the op table.
#define CONFORMANCE_CASE(Name)                                \
  static void Name##_case(::gemmax::conformance::Harness& h); \
  TEST_P(OpConformance, Name) { Name##_case(*h); }            \
  [[maybe_unused]] static const bool Name##_added =           \
      ::gemmax::conformance::add_case(#Name, &Name##_case);   \
  static void Name##_case(::gemmax::conformance::Harness& h)

// Shared by the attention cases and the cpu backend's scratch-size test (cpu_backend_test.cc):
// 2 x 300 positions, 8 query heads over 2 kv heads, three documents in the second row, windows
// of 100 and none; the backward too unless `forward_only`.
void attention_over_many_blocks(Harness& h, bool forward_only);
// Attention's operands of shape s, in the order attention_calls reads them: q, k (both drawn at
// qk_scale), v, the segment ids, o, lse, dout, dq, dk, dv.
Tensors attention_operands(Harness& h, DType dt, const AttentionShape& s,
                           const std::vector<int32_t>& segments, double qk_scale);
// attention_forward on attention_operands, then attention_backward unless `forward_only`.
OpCalls attention_calls(const AttentionShape& s, bool forward_only = false);
// "B=2 S=9 H=4/2 hd=6 window=3 docs=2" (and " round_scores"): an attention case's name.
std::string describe_attention(const AttentionShape& s, int docs);

}  // namespace gemmax::conformance
