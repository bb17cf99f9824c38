// Chat templates: a `messages` conversation rendered as the model's chat template renders it,
// with the spans of text the loss counts (the assistant turns).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gemmax/data/jinja.h"

namespace gemmax {

// Where a template comes from, as transformers looks for it: a model folder's
// chat_template.jinja, else its tokenizer_config.json "chat_template" (a string, or a list of
// {name, template} of which "default" is taken). Also reads the folder's bos/eos token text.
struct ChatTemplateSource {
  std::string text;
  std::string name;                 // the file it came from (for errors)
  std::string bos_token = "<bos>";  // the special tokens' text, as the template writes them
  std::string eos_token = "<eos>";
};
ChatTemplateSource chat_template_from_model_dir(const std::string& dir);
ChatTemplateSource chat_template_from_file(const std::string& path);

struct RenderedChat {
  std::string text;
  // Byte ranges [begin, end) of `text` that the loss counts, one per assistant turn: the
  // template's {% generation %} blocks where it has them (transformers' assistant mask), else
  // what the turn's rendering adds after the generation prompt (its content and closing text).
  std::vector<std::pair<size_t, size_t>> assistant_spans;
  size_t renders = 1;  // the template renders it took to find them
};

// How the assistant spans are found, for templates without {% generation %} blocks. Both give
// the same spans wherever the template renders each turn the same whatever follows it, and
// writes the same text for every turn of one kind where the one render learns it.
enum class SpanSearch {
  kOneRender,      // the full render, its loop over the messages traced; what opens a turn
                   // (the generation prompt, or nothing where a reply continues the model's
                   // turn) and what a turn that reads later turns writes when none follow (a
                   // tool call) are rendered once per kind; the plain way where the trace
                   // cannot place a turn
  kPrefixRenders,  // the plain way: each turn's prompt and turn rendered alone (2 renders a turn)
};

// One conversation as transformers' apply_chat_template receives it: the messages, with the
// keys whose value is null dropped and the reasoning fields aliased as transformers does, and
// the template's other variables (tools, documents, extra keyword arguments).
struct Conversation {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  explicit ChatTemplate(const ChatTemplateSource& source, jinja::Limits limits = {});
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

  // A JSONL line or dataset row as TRL passes it to the template: its "messages" (a list of
  // {role, content, ...}; roles system, developer, user, assistant, tool), its "tools" and
  // "documents" (null when absent, as transformers passes them), the entries of its
  // "chat_template_kwargs", and any other top-level key the template reads by name.
  Conversation conversation(const nlohmann::ordered_json& example) const;

  // Renders with add_generation_prompt false. Throws gemmax::Error naming the problem.
  RenderedChat render(const Conversation& c, SpanSearch search = SpanSearch::kOneRender) const;
  std::string render_text(const Conversation& c, bool add_generation_prompt,
                          jinja::RenderTrace* trace = nullptr) const;

 private:
  std::pair<size_t, size_t> prefix_span(const Conversation& c, size_t k, const std::string& full,
                                        size_t& renders) const;

  jinja::Template template_;
  jinja::Limits limits_;
  std::string bos_, eos_;
};

// One JSON line of chat data, read as Python's json.loads reads it where the template could
// tell: an integer beyond 64 bits (an int there, a float in a C++ JSON reader) is an error
// naming it, never a different number.
nlohmann::ordered_json parse_chat_line(const std::string& text);

class Tokenizer;
// Ids of rendered chat text, appended to `ids`: the template's bos/eos text become the
// tokenizer's special ids, the rest is encoded.
void encode_rendered(const Tokenizer& tok, const ChatTemplate& t, std::string_view text,
                     std::vector<int32_t>& ids);

}  // namespace gemmax
