// A closing or continuing tag with no block open is a syntax error naming the tag and its place,
// as Jinja reports it; a statement gemmax lacks is "not supported".
#include <gtest/gtest.h>

#include "gemmax/data/jinja.h"
#include "test_util.h"

namespace gemmax {
namespace {

TEST(JinjaSyntax, AClosingTagWithNothingOpenIsASyntaxError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a{% endif %}", "an if block"},     {"{% else %}", "an if block"},
      {"{% elif x %}", "an if block"},     {"x{% endfor %}", "a for block"},
      {"{% endmacro %}", "a macro block"}, {"{% if a %}{% endfor %}{% endif %}", "a for block"}};
  for (const auto& [text, open] : cases)
    testing::expect_error([&] { jinja::Template(text, "t.jinja"); },
                          {"t.jinja:1:", "unexpected '{% ", "no open block takes it here", open});
  testing::expect_error([] { jinja::Template("{% raw %}x{% endraw %}", "t.jinja"); },
                        {"'{% raw %}' is not supported"});
  EXPECT_EQ(jinja::Template("{% for x in [1, 2] %}{{ x }}{% else %}none{% endfor %}", "t.jinja")
                .render(nlohmann::ordered_json::object()),
            "12");
}

}  // namespace
}  // namespace gemmax
