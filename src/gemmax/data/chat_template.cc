#include "gemmax/data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gemmax/base/error.h"

namespace gemmax {
namespace {

std::string read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", what, " '", path, "': no such file, or not readable");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("error reading ", what, " '", path, "'");
  return ss.str();
}

// tokenizer_config.json's bos_token/eos_token: a string or {"content": ...}.
void read_special(const nlohmann::json& config, const char* key, std::string& out) {
  if (!config.contains(key)) return;
  const nlohmann::json& v = config[key];
  if (v.is_string())
    out = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string())
    out = v["content"].get<std::string>();
}

}  // namespace

ChatTemplateSource chat_template_from_file(const std::string& path) {
  ChatTemplateSource s;
  s.text = read_text(path, "chat template");
  s.name = path;
  return s;
}

ChatTemplateSource chat_template_from_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  ChatTemplateSource s;
  nlohmann::json config;
  const bool has_config = fs::exists(config_path);
  if (has_config) {
    try {
      config = nlohmann::json::parse(read_text(config_path, "tokenizer config"));
    } catch (const nlohmann::json::exception& e) {
      fail(config_path, ": not valid JSON (", e.what(), ")");
    }
    read_special(config, "bos_token", s.bos_token);
    read_special(config, "eos_token", s.eos_token);
  }
  if (fs::exists(jinja_path)) {
    s.text = read_text(jinja_path, "chat template");
    s.name = jinja_path;
    return s;
  }
  if (!has_config || !config.contains("chat_template"))
    fail("model folder '", dir,
         "' has no chat template: neither chat_template.jinja nor a "
         "\"chat_template\" in tokenizer_config.json; give the template with "
         "--chat_template_path FILE or --chat_template TEXT");
  const nlohmann::json& t = config["chat_template"];
  s.name = config_path + " (chat_template)";
  if (t.is_string()) {
    s.text = t.get<std::string>();
    return s;
  }
  if (t.is_array())
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string()) {
        s.text = e["template"].get<std::string>();
        return s;
      }
  fail(config_path, ": \"chat_template\" is ", t.type_name(),
       "; expected a string, or a list of {\"name\", \"template\"} with one named \"default\"");
}

ChatTemplate::ChatTemplate(const ChatTemplateSource& source)
    : template_(source.text, source.name), bos_(source.bos_token), eos_(source.eos_token) {}

std::string ChatTemplate::render_text(const nlohmann::ordered_json& messages,
                                      bool add_generation_prompt) const {
  nlohmann::ordered_json context = {{"messages", messages},
                                    {"bos_token", bos_},
                                    {"eos_token", eos_},
                                    {"add_generation_prompt", add_generation_prompt}};
  return template_.render(context);
}

RenderedChat ChatTemplate::render(const nlohmann::ordered_json& messages) const {
  static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  if (!messages.is_array() || messages.empty())
    fail("\"messages\" must be a non-empty list of {\"role\", \"content\"} turns");
  for (size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      fail("message ", k, " is not an object with a string \"role\"");
    const std::string role = m["role"].get<std::string>();
    if (std::find(std::begin(kRoles), std::end(kRoles), role) == std::end(kRoles))
      fail("message ", k, " has the unknown role \"", role,
           "\"; expected system, developer, user, assistant or tool");
    if (!m.contains("content")) fail("message ", k, " (", role, ") has no \"content\"");
  }
  RenderedChat r;
  r.text = render_text(messages, false);
  // An assistant turn's counted text is what rendering it adds to the conversation before it
  // followed by the generation prompt: MaxText's and TRL's completion of a prompt.
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k]["role"] != "assistant") continue;
    nlohmann::ordered_json before = nlohmann::ordered_json::array(), upto;
    for (size_t j = 0; j < k; ++j) before.push_back(messages[j]);
    upto = before;
    upto.push_back(messages[k]);
    const std::string prompt = k == 0 ? std::string() : render_text(before, true);
    const std::string with_turn = render_text(upto, false);
    if (with_turn.compare(0, prompt.size(), prompt) != 0 ||
        r.text.compare(0, with_turn.size(), with_turn) != 0)
      fail("the chat template does not render message ", k,
           " (assistant) as an extension of the conversation before it (with the generation "
           "prompt), so its tokens cannot be told apart; write this conversation as "
           "{\"prompt\", \"completion\"} pairs");
    r.assistant_spans.emplace_back(prompt.size(), with_turn.size());
  }
  return r;
}

}  // namespace gemmax
