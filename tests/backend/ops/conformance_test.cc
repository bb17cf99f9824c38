// The op conformance suite: its backends as tests, and the check that every op has a case. The
// cases are in the other files of backend/ops/; op_conformance.h says how they compare, and
// support/op_conformance.cc is the harness.
#include "op_conformance.h"

#include <sstream>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/base/error.h"

namespace gemmax::conformance {

void OpConformance::SetUp() {
  const Target& target = GetParam();
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(target.options);
  } catch (const Error& e) {
    const std::string why = e.what();
    if (target.options.name == "cuda") GTEST_SKIP() << "no CUDA device: " << why;
    if (why.find("this CPU (") != std::string::npos) GTEST_SKIP() << why;
    FAIL() << target.name << ": " << why;
  }
  h = std::make_unique<Harness>(std::move(be), target.name);
}

INSTANTIATE_TEST_SUITE_P(Backends, OpConformance, ::testing::ValuesIn(all_targets()),
                         [](const auto& info) { return info.param.name; });

// Every op of backend/ops/op_list.h is called by some case: an op added without one fails here,
// by name. The cases run on the reference backend, through a recording backend.
TEST(OpConformanceTable, EveryOpHasACase) {
  Harness h(make_backend("reference"));
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    c.run(h);
  }
  std::vector<std::string> missing;
#define GEMMAX_OP_NAME(op, Args, family) \
  if (!h.ops_called().count(#op)) missing.push_back(#op);
  GEMMAX_BACKEND_OPS(GEMMAX_OP_NAME)
#undef GEMMAX_OP_NAME
  std::ostringstream names;
  for (const std::string& m : missing) names << " " << m;
  EXPECT_TRUE(missing.empty()) << "ops no conformance case calls (add a CONFORMANCE_CASE in "
                                  "tests/backend/ops/):"
                               << names.str();
  EXPECT_GE(cases().size(), 10u);
}

}  // namespace gemmax::conformance
