// Chat templates: a `messages` conversation rendered as the model's chat template renders it,
// with the spans of text the loss counts (the assistant turns).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
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
  // Byte ranges [begin, end) of `text` that the loss counts: for each assistant turn, what its
  // rendering adds after the generation prompt (its content and the turn's closing text).
  std::vector<std::pair<size_t, size_t>> assistant_spans;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(const ChatTemplateSource& source);
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

  // Renders `messages` (a list of {role, content, ...}; roles system, developer, user,
  // assistant, tool) with add_generation_prompt false. Throws gemmax::Error naming the problem.
  RenderedChat render(const nlohmann::ordered_json& messages) const;
  std::string render_text(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;

 private:
  jinja::Template template_;
  std::string bos_, eos_;
};

}  // namespace gemmax
