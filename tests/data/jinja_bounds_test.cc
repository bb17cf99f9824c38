// A template is untrusted input (it comes with a downloaded model): deep expressions, runaway
// loops and memory-hungry renders stop with an error naming the bound and how to raise it.
#include <gtest/gtest.h>

#include <chrono>
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
  testing::expect_error([&] { render("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}"); },
                        {"t.jinja:1:", "output exceeds 64 MiB", "no option raises"});
}

// A string or list is checked against the bounds before it is built: a short template asking
// for gigabytes (a long separator joined many times, a long replacement) used to reach 10 to
// 20 GB before failing.
TEST(JinjaBounds, WhatARenderBuildsIsCheckedBeforeItIsBuilt) {
  const auto start = std::chrono::steady_clock::now();
  for (const char* t :
       {"{{ range(100000)|join('x' * 100000) }}",
        "{{ ('x' * 1000000)|replace('x', 'y' * 100000) }}",
        "{{ ('x' * 1000000).replace('x', 'y' * 100000, 1000) }}",
        "{{ ('y' * 100000).join(('x' * 100000)|list) }}",
        "{{ ('x' * 1000000)|replace('', 'y' * 1000) }}", "{{ 'x' * 100000 * 1000 }}",
        "{{ ('x' * 1000000) ~ ('x' * 16000000) }}", "{{ ('<' * 10000000)|e }}",
        "{{ (['x' * 1000] * 10000)|tojson(indent='y' * 100000) }}"})
    testing::expect_error([&] { render(t); },
                          {"t.jinja:1:", "builds a string longer than 16 MiB", "no option raises"});
  for (const char* t :
       {"{{ (['x' * 1000000] * 10000)|length }}", "{{ ['x' * 100000] * 10000 }}",
        "{{ range(10 ** 12)|length }}", "{{ range(-5, 10 ** 12, 3)|length }}",
        "{{ (('x,' * 8000000).split(','))|length }}", "{{ ('x ' * 8000000).split()|length }}",
        "{{ ('x' * 16000000)|list|length }}"})
    testing::expect_error([&] { render(t); },
                          {"t.jinja:1:", "more than 512 MiB of strings and lists",
                           "raise the limit with chat_template_max_mib"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  // Within the bounds the same operations give Python's results.
  EXPECT_EQ(render("{{ range(3)|join('ab') }}"), "0ab1ab2");
  EXPECT_EQ(render("{{ 'abc'|replace('', '-') }}|{{ 'abc'.replace('', '-', 2) }}"),
            "-a-b-c-|-a-bc");
  EXPECT_EQ(render("{{ 'aXbXc'.replace('X', 'yy', 1) }}|{{ 'aXbXc'|replace('X', '', -3) }}"),
            "ayybXc|abc");
  EXPECT_EQ(render("{{ range(-5, 10, 4)|list }}|{{ range(5, -5, -3)|list }}"),
            "[-5, -1, 3, 7]|[5, 2, -1, -4]");
  EXPECT_EQ(render("{{ [] * 1000000000000 }}{{ '' * 1000000000000 }}{{ 'ab' * 2 }}"), "[]abab");
  EXPECT_EQ(render("{{ \"<a & 'b'>\"|e }}"), "&lt;a &amp; &#39;b&#39;&gt;");
}

// Work on long strings is paid for as it is done (a step per 64 bytes copied or scanned), and
// so is work on lists that hold another list twice: a loop of a few expressions over a 16 MB
// string used to run for hours within the step limit.
TEST(JinjaBounds, WorkOnLongStringsAndSharedListsCountsAsSteps) {
  const std::string big = "{% set s = 'x' * 16000000 %}{% for i in range(1000000) %}";
  const std::string doubled =
      "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}"
      "{% endfor %}";
  const std::vector<std::string> shapes = {
      big + "{% if s|length %}{% endif %}{% endfor %}",
      big + "{% if s.strip() %}{% endif %}{% endfor %}",
      big + "{{ s|trim|length }}{% endfor %}",
      big + "{% if s.split() %}{% endif %}{% endfor %}",
      big + "{% if 'xxxxxxxxxxxxy' in s %}{% endif %}{% endfor %}",
      big + "{% if s[-1] == s[5] %}{% endif %}{% endfor %}",
      big + "{% if s.find('y') %}{% endif %}{% endfor %}",
      big + "{% if s[1:-1] %}{% endif %}{% endfor %}",
      big + "{% if s.endswith(s) %}{% endif %}{% endfor %}",
      doubled + "{{ ns.l == ns.l }}",
      doubled + "{{ ns.l|tojson|length }}",
      doubled + "{{ ns.l|string|length }}",
      doubled + "{{ ns.l in [ns.l] }}"};
  jinja::Limits few;
  few.max_steps = 1'000'000;
  few.steps_option = "--chat_template_max_steps";
  for (const std::string& t : shapes)
    testing::expect_error([&] { render(t, few); },
                          {"t.jinja:1:", "runs too long (over 1000000 steps", "bytes of strings",
                           "--chat_template_max_steps"});
  // With the default bounds too it fails in seconds.
  const auto start = std::chrono::steady_clock::now();
  testing::expect_error([&] { render(shapes[0]); }, {"t.jinja:1:", "runs too long"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace gemmax
