// Python's numbers in templates: ints without a bound (a tool call's 64-bit id, 2**100),
// int()/float() of strings with Python's syntax, round() half to even on the float's exact
// value, and transformers' tojson with json.dumps's arguments. The cases are jinja2's own
// renders (jinja2_fixtures/make_numbers.py); where gemmax cannot match Python it is an error
// naming the feature, never a different text.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "gemmax/base/error.h"
#include "gemmax/data/chat_template.h"
#include "gemmax/data/jinja.h"
#include "gemmax/data/jinja_value.h"
#include "test_util.h"

namespace gemmax {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& text, const json& context = json::object()) {
  return jinja::Template(text, "t.jinja").render(context);
}

TEST(JinjaNumbers, EveryCaseRendersAsJinja2Does) {
  std::ifstream in(std::string(GEMMAX_SOURCE_DIR) + "/tests/data/jinja2_fixtures/numbers.json");
  ASSERT_TRUE(in);
  const json all = json::parse(in);
  size_t outputs = 0, errors = 0;
  for (const json& c : all["cases"]) {
    const std::string t = c["template"].get<std::string>();
    std::string got, error;
    try {
      got = render(t, c["context"]);
    } catch (const Error& e) {
      error = e.what();
    }
    if (c.contains("output")) {
      EXPECT_EQ(error, "") << t;
      EXPECT_EQ(got, c["output"].get<std::string>()) << t;
      ++outputs;
    } else {
      EXPECT_NE(error, "") << t << " renders '" << got << "'; jinja2 raises "
                           << c["error"].get<std::string>();
      ++errors;
    }
  }
  EXPECT_GT(outputs, 150u);
  EXPECT_GE(errors, 10u);
}

// What Python computes but a template here cannot hold: an error that names it.
TEST(JinjaNumbers, WhatGemmaxCannotHoldIsAnErrorNamingIt) {
  testing::expect_error([] { render("{{ (-8) ** 0.5 }}"); }, {"t.jinja:1:", "complex number"});
  testing::expect_error([] { render("{% set s = 'inf' %}{{ s | float | int }}"); }, {"cannot convert float infinity"});
  testing::expect_error([] { render("{{ 2 ** (10 ** 12) }}"); }, {"chat_template_max_mib"});
  testing::expect_error([] { render("{{ range(2**70) }}"); }, {"beyond 64 bits"});
  testing::expect_error([] { render("{{ 'ab' * 2**70 }}"); }, {"2**63 times"});
}

// A JSON line's integer beyond 64 bits is an int to Python's json.loads but a float to
// nlohmann's reader: refused, naming the number, rather than rendered differently.
TEST(JinjaNumbers, ChatLinesKeepTheirIntegersOrSayWhy) {
  const json ok = parse_chat_line(R"({"id": 18446744073709551615})");
  EXPECT_TRUE(jinja::Value::from_json(ok["id"]).big);  // beyond int64, within uint64
  EXPECT_EQ(render("{{ id + 1 }}", ok), "18446744073709551616");
  testing::expect_error(
      [] { parse_chat_line(R"({"messages": [{"role": "user", "content": 123456789012345678901234567890}]})"); },
      {"the integer 123456789012345678901234567890 is beyond 64 bits", "write it as a string"});
  EXPECT_EQ(parse_chat_line(R"({"x": 1.5e300})")["x"].get<double>(), 1.5e300);
}

}  // namespace
}  // namespace gemmax
