// A template is untrusted input (it comes with a downloaded model): deep expressions, runaway
// loops and memory-hungry renders stop with an error naming the bound and how to raise it.
#include <gtest/gtest.h>

#include <string>

#include "gemmax/base/error.h"
#include "gemmax/data/jinja.h"
#include "test_util.h"

namespace gemmax {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& text, const jinja::Limits& limits = {}) {
  return jinja::Template(text, "t.jinja").render(json::object(), limits);
}

std::string repeat(const std::string& s, int n, const std::string& sep) {
  std::string out;
  for (int k = 0; k < n; ++k) out += (k ? sep : "") + s;
  return out;
}

// Chains parse in a loop but build trees as deep as they are long; 10,000 links used to
// overflow the stack.
TEST(JinjaBounds, LongChainsAreAnErrorNamingTheirPlace) {
  for (const char* op : {" + ", " ~ ", " and ", " or ", " * ", " == "}) {
    EXPECT_EQ(render("{{ " + repeat("1", 100, op) + " }}").empty(), false) << op;
    testing::expect_error([&] { render("{{ " + repeat("1", 10000, op) + " }}"); },
                          {"t.jinja:1:", "deeper than 500 levels", "split it with {% set %}"});
  }
  testing::expect_error([] { render("{{ 'a'" + repeat(" | trim", 10000, "") + " }}"); },
                        {"t.jinja:1:", "deeper than 500 levels"});
  testing::expect_error([] { render("{{ x" + repeat(".a", 10000, "") + " }}"); },
                        {"deeper than 500 levels"});
  testing::expect_error([] { render("{{ 1" + repeat(" if 1 else 2", 10000, "") + " }}"); },
                        {"deeper than 500 levels"});
}

// A recursive macro over a deep expression nests evaluations beyond either bound alone.
TEST(JinjaBounds, RecursiveMacrosOverDeepExpressionsStop) {
  const std::string t = "{% macro m(n) %}{% if n > 0 %}{{ " + repeat("-", 150, " ") +
                        " (m(n - 1) | length) }}{% endif %}{% endmacro %}{{ m(199) }}";
  testing::expect_error([&] { render(t); }, {"t.jinja:1:", "nested too deeply", "MiB of stack"});
}

TEST(JinjaBounds, MemoryAndStepsAreBoundedWithTheLimitNamed) {
  const std::string doubling =
      "{% set ns = namespace(s=[1]) %}{% for i in range(30) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}{{ ns.s | length }}";
  jinja::Limits small;
  small.max_bytes = int64_t(64) << 20;
  small.bytes_option = "--chat_template_max_mib";
  testing::expect_error(
      [&] { render(doubling, small); },
      {"t.jinja:1:", "more than 64 MiB of strings and lists", "--chat_template_max_mib"});
  // Big strings gathered into a list: each copy counts.
  const std::string gather =
      "{% set ns = namespace(l=[], s='x' * 1000000) %}{% for i in range(5000) %}"
      "{% set ns.l = ns.l + [ns.s ~ i] %}{% endfor %}{{ ns.l | length }}";
  testing::expect_error([&] { render(gather, small); }, {"more than 64 MiB"});
  // Within a raised limit the same kind of render completes.
  const std::string modest =
      "{% set ns = namespace(s=[1]) %}{% for i in range(16) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}{{ ns.s | length }}";
  jinja::Limits tiny;
  tiny.max_bytes = int64_t(1) << 20;
  testing::expect_error([&] { render(modest, tiny); }, {"more than 1 MiB"});
  EXPECT_EQ(render(modest, small), "65536");
  jinja::Limits few_steps;
  few_steps.max_steps = 1000;
  few_steps.steps_option = "--chat_template_max_steps";
  testing::expect_error([&] { render("{% for i in range(100000) %}{% endfor %}", few_steps); },
                        {"runs too long", "over 1000 steps", "--chat_template_max_steps"});
}

}  // namespace
}  // namespace gemmax
