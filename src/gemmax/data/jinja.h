// A Jinja renderer for the subset chat templates use: {{ }}, {% if/elif/else %}, {% for %} with
// loop.* and else, {% set %} (names, namespace attributes, blocks), {% macro %} with defaults and
// keyword arguments, break/continue, whitespace control (`-`, `+`, trim_blocks, lstrip_blocks,
// as transformers configures Jinja), Python's operators and string/dict methods, the common
// filters and tests, namespace(), range(), raise_exception() and transformers' {% generation %}.
// Templates run in a sandbox: no attribute of the host is reachable; memory, time, output and
// recursion are bounded. Errors name the template, line and column.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace gemmax::jinja {

struct Node;

// What one render may spend. A template is untrusted input (it comes with a downloaded model),
// so each bound stops a runaway render with an error naming the bound; real chat templates
// stay far below them.
struct Limits {
  int64_t max_bytes = int64_t(512) << 20;  // strings and lists made, as a running total
  int64_t max_steps = 20'000'000;          // evaluations, elements made, bytes scanned / 64
  int64_t max_output = int64_t(1) << 26;   // rendered text
  // How the user raises them, quoted by the errors (e.g. "--chat_template_max_mib").
  std::string bytes_option = "chat_template_max_mib", steps_option = "chat_template_max_steps";
};

// What a render can record of where its output came from, so a conversation's assistant text
// is found in one render.
struct RenderTrace {
  // For each element of the context's "messages" list: the output range [begin, end) of the
  // iteration of a top-level for loop over it (the outermost, if loops nest), or (npos, npos)
  // when none wrote output; `repeated` when two such iterations wrote output.
  std::vector<std::pair<size_t, size_t>> message_output;
  std::vector<bool> repeated;
  // Whether the iteration wrote output after reading a later message (its text depends on the
  // turns after it), and then the output size when it first read one (else npos).
  std::vector<bool> reads_later;
  std::vector<size_t> lookahead_output;
  // The output ranges of {% generation %} blocks (transformers' assistant-mask blocks), and
  // whether one was rendered elsewhere than the output itself (into a macro or a set block).
  std::vector<std::pair<size_t, size_t>> generation;
  bool generation_elsewhere = false;
};

class Template {
 public:
  // Parses `source`; `name` (a file, or what the text is) starts every error message.
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;

  // Renders with the variables of `context` (a JSON object). Throws gemmax::Error on a
  // template error, and for raise_exception("...") with the template's message.
  std::string render(const nlohmann::ordered_json& context, const Limits& limits = {},
                     RenderTrace* trace = nullptr) const;
  const std::string& name() const { return name_; }
  // The names the template reads (variables, macros and loop names included).
  const std::vector<std::string>& names() const { return names_; }
  bool has_generation_blocks() const { return has_generation_; }

 private:
  std::string name_;
  std::vector<std::string> names_;
  bool has_generation_ = false;
  std::unique_ptr<std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace gemmax::jinja
