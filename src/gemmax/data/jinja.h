// A Jinja renderer for the subset chat templates use: {{ }}, {% if/elif/else %}, {% for %} with
// loop.* and else, {% set %} (names, namespace attributes, blocks), {% macro %} with defaults and
// keyword arguments, break/continue, whitespace control (`-`, `+`, trim_blocks, lstrip_blocks,
// as transformers configures Jinja), Python's operators and string/dict methods, the common
// filters and tests, namespace(), range() and raise_exception(). Templates run in a sandbox: no
// attribute of the host is reachable, output and recursion are bounded. Errors name the
// template, line and column.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace gemmax::jinja {

struct Node;

class Template {
 public:
  // Parses `source`; `name` (a file, or what the text is) starts every error message.
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;

  // Renders with the variables of `context` (a JSON object). Throws gemmax::Error on a
  // template error, and for raise_exception("...") with the template's message.
  std::string render(const nlohmann::ordered_json& context) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::unique_ptr<std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace gemmax::jinja
