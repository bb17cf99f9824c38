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

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
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

// A case's operands by name: an aggregate of Tensors named after the op arguments they feed, in
// the order the case draws them (struct Gmm { Tensor lhs, rhs, group_sizes, out; }), so that a
// case reads got.out rather than got[3].
namespace detail {
struct AnyTensor {
  operator Tensor() const;  // declared only: it counts an aggregate's members
};
template <class Ops, class... Seen>
constexpr size_t count_fields() {
  if constexpr (requires { Ops{Seen{}..., AnyTensor{}}; })
    return count_fields<Ops, Seen..., AnyTensor>();
  else
    return sizeof...(Seen);
}
}  // namespace detail

// Only Tensors: one member per Tensor's worth of bytes.
template <class Ops>
concept Operands = std::is_aggregate_v<Ops> &&
                   detail::count_fields<Ops>() * sizeof(Tensor) == sizeof(Ops);

// Pointers to the members of `ops`, in declaration order (to const members of a const ops).
template <class Ops>
  requires Operands<std::remove_const_t<Ops>>
auto fields(Ops& ops) {
  constexpr size_t n = detail::count_fields<std::remove_const_t<Ops>>();
  static_assert(n <= 12, "fields: more than 12 operands; add a case below");
  // clang-format off
  if constexpr (n == 1) { auto& [a] = ops; return std::array{&a}; }
  else if constexpr (n == 2) { auto& [a, b] = ops; return std::array{&a, &b}; }
  else if constexpr (n == 3) { auto& [a, b, c] = ops; return std::array{&a, &b, &c}; }
  else if constexpr (n == 4) { auto& [a, b, c, d] = ops; return std::array{&a, &b, &c, &d}; }
  else if constexpr (n == 5) {
    auto& [a, b, c, d, e] = ops;
    return std::array{&a, &b, &c, &d, &e};
  } else if constexpr (n == 6) {
    auto& [a, b, c, d, e, f] = ops;
    return std::array{&a, &b, &c, &d, &e, &f};
  } else if constexpr (n == 7) {
    auto& [a, b, c, d, e, f, g] = ops;
    return std::array{&a, &b, &c, &d, &e, &f, &g};
  } else if constexpr (n == 8) {
    auto& [a, b, c, d, e, f, g, h] = ops;
    return std::array{&a, &b, &c, &d, &e, &f, &g, &h};
  } else if constexpr (n == 9) {
    auto& [a, b, c, d, e, f, g, h, i] = ops;
    return std::array{&a, &b, &c, &d, &e, &f, &g, &h, &i};
  } else if constexpr (n == 10) {
    auto& [a, b, c, d, e, f, g, h, i, j] = ops;
    return std::array{&a, &b, &c, &d, &e, &f, &g, &h, &i, &j};
  } else if constexpr (n == 11) {
    auto& [a, b, c, d, e, f, g, h, i, j, k] = ops;
    return std::array{&a, &b, &c, &d, &e, &f, &g, &h, &i, &j, &k};
  } else {
    auto& [a, b, c, d, e, f, g, h, i, j, k, l] = ops;
    return std::array{&a, &b, &c, &d, &e, &f, &g, &h, &i, &j, &k, &l};
  }
  // clang-format on
}

// Named operands from tensors in member order: the inverse of fields().
template <Operands Ops>
Ops operands(const Tensors& tensors) {
  Ops ops{};
  size_t i = 0;
  for (Tensor* t : fields(ops)) *t = tensors.at(i++);
  return ops;
}

// The named outputs of a run: the backend under test's, and the reference's in fp64.
template <Operands Ops>
struct Outcome {
  Ops got, truth;
};

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
  // The same on named operands: `calls(be, ops)` gets them, and the outputs come back named.
  template <Operands Ops, class Calls>
  Outcome<Ops> run(const Ops& ops, const Calls& calls) {
    Tensors tensors;
    for (const Tensor* t : fields(ops)) tensors.push_back(*t);
    Outputs out =
        run(tensors, [&](Backend& be, const Tensors& t) { calls(be, operands<Ops>(t)); });
    return {operands<Ops>(out.got), operands<Ops>(out.truth)};
  }

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

// Shared by the attention cases and the cpu backend's scratch-size test
// (backend/cpu/cpu_backend_test.cc): 2 x 300 positions, 8 query heads over 2 kv heads, three
// documents in the second row, windows of 100 and none; the backward too unless `forward_only`.
void attention_over_many_blocks(Harness& h, bool forward_only);
// Attention's operands: the forward's inputs, its outputs o and lse, dout and the gradients.
struct AttentionOperands {
  Tensor q, k, v, segment_ids, o, lse, dout, dq, dk, dv;
};
using AttentionCalls = std::function<void(Backend&, const AttentionOperands&)>;
// Attention's operands of shape s, q and k drawn at qk_scale.
AttentionOperands attention_operands(Harness& h, DType dt, const AttentionShape& s,
                                     const std::vector<int32_t>& segments, double qk_scale);
// attention_forward on attention_operands, then attention_backward unless `forward_only`.
AttentionCalls attention_calls(const AttentionShape& s, bool forward_only = false);
// "B=2 S=9 H=4/2 hd=6 window=3 docs=2" (and " round_scores"): an attention case's name.
std::string describe_attention(const AttentionShape& s, int docs);

// Shared by the routing cases (moe_test.cc) and the grouped matmuls on a routing (gmm_test.cc):
// T tokens choosing K of E experts (and the row widths a case runs at).
struct RoutedSize {
  int64_t T, K, E;
  std::vector<int64_t> widths;
};
// Expert choices idx [T, K] that never pick expert 5: by a formula, or at random.
Tensor choices(Harness& h, const RoutedSize& z, bool random);
// route_sort's operands: the expert choices idx [T, K], then the Routing it writes.
struct RouteSort {
  Tensor idx, order, inverse, token, group_sizes;
};

}  // namespace gemmax::conformance
