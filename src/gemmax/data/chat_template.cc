#include "gemmax/data/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "gemmax/base/error.h"
#include "gemmax/data/tokenizer.h"

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

ChatTemplate::ChatTemplate(const ChatTemplateSource& source, jinja::Limits limits)
    : template_(source.text, source.name),
      limits_(std::move(limits)),
      bos_(source.bos_token),
      eos_(source.eos_token) {}

Conversation ChatTemplate::conversation(const nlohmann::ordered_json& example) const {
  using json = nlohmann::ordered_json;
  static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  if (!example.is_object() || !example.contains("messages"))
    fail("a conversation is a JSON object with \"messages\"");
  const json& messages = example["messages"];
  if (!messages.is_array() || messages.empty())
    fail("\"messages\" must be a non-empty list of {\"role\", \"content\"} turns");
  Conversation c;
  c.messages = json::array();
  for (size_t k = 0; k < messages.size(); ++k) {
    const json& m = messages[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      fail("message ", k, " is not an object with a string \"role\"");
    const std::string role = m["role"].get<std::string>();
    if (std::find(std::begin(kRoles), std::end(kRoles), role) == std::end(kRoles))
      fail("message ", k, " has the unknown role \"", role,
           "\"; expected system, developer, user, assistant or tool");
    // transformers drops the keys whose value is null (OpenAI's exports write "content": null
    // and "tool_calls": null), then fills every name of the reasoning from the first one given.
    json kept = json::object();
    for (const auto& [key, value] : m.items())
      if (!value.is_null()) kept[key] = value;
    const json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (!reasoning && kept.contains(key)) reasoning = &kept[key];
    if (reasoning) {
      json aliased = {{"thinking", *reasoning}};
      for (const auto& [key, value] : kept.items()) aliased[key] = value;
      aliased["reasoning_content"] = *reasoning;
      kept = std::move(aliased);
    }
    c.messages.push_back(std::move(kept));
  }
  c.variables["tools"] = example.value("tools", json());
  c.variables["documents"] = example.value("documents", json());
  if (example.contains("chat_template_kwargs")) {
    const json& kwargs = example["chat_template_kwargs"];
    if (!kwargs.is_object())
      fail("\"chat_template_kwargs\" is ", kwargs.type_name(),
           "; expected an object of the template's keyword arguments");
    for (const auto& [key, value] : kwargs.items()) {
      if (key == "messages" || key == "add_generation_prompt")
        fail("\"chat_template_kwargs\" sets \"", key, "\", which the renderer sets itself");
      c.variables[key] = value;
    }
  }
  // Other keys of the line reach the template only where it reads them (e.g. enable_thinking);
  // the rest (ids, sources) are the dataset's own.
  const std::vector<std::string>& names = template_.names();
  for (const auto& [key, value] : example.items())
    if (key != "messages" && key != "chat_template_kwargs" && !c.variables.contains(key) &&
        std::binary_search(names.begin(), names.end(), key))
      c.variables[key] = value;
  return c;
}

std::string ChatTemplate::render_text(const Conversation& c, bool add_generation_prompt,
                                      jinja::RenderTrace* trace) const {
  // transformers: render(messages, tools, documents, add_generation_prompt, **special tokens,
  // **kwargs), the keyword arguments overriding the special tokens.
  nlohmann::ordered_json context = {{"messages", c.messages},
                                    {"add_generation_prompt", add_generation_prompt},
                                    {"bos_token", bos_},
                                    {"eos_token", eos_}};
  for (const auto& [key, value] : c.variables.items()) context[key] = value;
  return template_.render(context, limits_, trace);
}

namespace {

using json = nlohmann::ordered_json;

Conversation first_messages(const Conversation& c, size_t k) {
  Conversation head = c;
  head.messages = json::array();
  for (size_t j = 0; j < k; ++j) head.messages.push_back(c.messages[j]);
  return head;
}

// A message as far as the text a template writes around it goes: its role, and which of the
// keys that steer the turn's shape (tool calls, tool responses, content, reasoning) it fills.
std::string message_kind(const json& m) {
  std::string kind = m["role"].get<std::string>();
  for (const char* key : {"tool_calls", "tool_responses", "content", "reasoning_content"}) {
    const bool filled = m.contains(key) && !m[key].empty() &&
                        !(m[key].is_string() && m[key].get_ref<const std::string&>().empty());
    kind += filled ? '+' : '-';
  }
  return kind;
}

// What opens assistant turn k depends on the message before it and on the last one before it
// that is not a tool's answer (a reply after answers continues the model's turn).
std::string opener_kind(const json& messages, size_t k) {
  size_t j = k - 1;
  while (j > 0 && messages[j]["role"] == "tool") --j;
  return message_kind(messages[k - 1]) + " after " + message_kind(messages[j]);
}

// What a turn writes once it reads the turns after it, when none follow, may hold its own
// content (Gemma 4 writes a call's text after its answers).
std::string tail_kind(const json& m) {
  return message_kind(m) + (m.contains("content") ? m["content"].dump() : std::string());
}

bool has_at(const std::string& text, size_t at, const std::string& part) {
  return at <= text.size() && text.compare(at, part.size(), part) == 0;
}

}  // namespace

std::pair<size_t, size_t> ChatTemplate::prefix_span(const Conversation& c, size_t k,
                                                    const std::string& full,
                                                    size_t& renders) const {
  // An assistant turn's counted text is what rendering it adds to the conversation before it
  // followed by the generation prompt: MaxText's and TRL's completion of a prompt.
  const std::string prompt = k == 0 ? std::string() : render_text(first_messages(c, k), true);
  const std::string with_turn = render_text(first_messages(c, k + 1), false);
  renders += k == 0 ? 1 : 2;
  if (with_turn.compare(0, prompt.size(), prompt) != 0 ||
      full.compare(0, with_turn.size(), with_turn) != 0)
    fail("the chat template does not render message ", k,
         " (assistant) as an extension of the conversation before it (with the generation "
         "prompt), so its tokens cannot be told apart; write this conversation as "
         "{\"prompt\", \"completion\"} pairs, or give the template {% generation %} blocks");
  return {prompt.size(), with_turn.size()};
}

RenderedChat ChatTemplate::render(const Conversation& c, SpanSearch search) const {
  jinja::RenderTrace trace;
  RenderedChat r;
  r.text = render_text(c, false, &trace);
  const std::string& full = r.text;
  if (template_.has_generation_blocks()) {
    if (trace.generation_elsewhere)
      fail(template_.name(),
           ": a {% generation %} block is rendered inside a macro or a set "
           "block, so where its text lands in the output is unknown; put the blocks in the "
           "template's own output");
    for (const auto& span : trace.generation)
      if (span.second > span.first) r.assistant_spans.push_back(span);
    return r;
  }
  const size_t n = c.messages.size();
  auto render_head = [&](size_t k, bool add_generation_prompt) {
    ++r.renders;
    return render_text(first_messages(c, k), add_generation_prompt);
  };
  auto assistant = [&](size_t k) { return c.messages[k]["role"] == "assistant"; };
  if (search == SpanSearch::kPrefixRenders) {
    for (size_t k = 0; k < n; ++k)
      if (assistant(k)) r.assistant_spans.push_back(prefix_span(c, k, full, r.renders));
    return r;
  }

  // One traced render. A turn is counted from the end of what opens its iteration (the
  // generation prompt, or nothing where the turn continues the model's) to the iteration's end
  // (the text's end for the last turn). A turn that reads the turns after it (Gemma 4 writes a
  // call's answers in the call's turn) ends where it would once it read them, with what it
  // writes from there when none follow. Both texts are what a prefix render writes there,
  // learned once per kind (opener_kind, tail_kind) from the first turn of the kind and checked
  // on the last; a turn the trace cannot place is found the plain way.
  auto traced = [&](size_t k) {
    return k > 0 && trace.message_output[k].first != std::string::npos && !trace.repeated[k];
  };
  struct Learned {
    size_t first = std::string::npos, last = 0;
    std::optional<std::string> text;
  };
  // Each traced turn's kinds (a map's entries stay where they are as it grows).
  std::map<std::string, Learned> openers, tails;
  std::vector<const Learned*> opener_of(n), tail_of(n);
  auto note = [](Learned& l, size_t k) {
    l.first = std::min(l.first, k);
    l.last = k;
    return &l;
  };
  for (size_t k = 0; k < n; ++k) {
    if (!assistant(k) || !traced(k)) continue;
    opener_of[k] = note(openers[opener_kind(c.messages, k)], k);
    if (trace.reads_later[k]) tail_of[k] = note(tails[tail_kind(c.messages[k])], k);
  }
  // What a prefix render writes from `at` on, where it agrees with the full render before
  // `at` and the full render writes it there too.
  auto written_from = [&](const std::string& prefix, size_t at) -> std::optional<std::string> {
    if (prefix.size() < at || prefix.compare(0, at, full, 0, at) != 0) return std::nullopt;
    std::string rest = prefix.substr(at);
    if (!has_at(full, at, rest)) return std::nullopt;
    return rest;
  };
  auto learn = [&](Learned& l, auto&& written) {
    l.text = written(l.first);
    if (l.text && l.last != l.first && written(l.last) != l.text) l.text.reset();
  };
  for (auto& [kind, l] : openers)
    learn(l, [&](size_t k) {
      return written_from(render_head(k, true), trace.message_output[k].first);
    });
  for (auto& [kind, l] : tails)
    learn(l, [&](size_t k) {
      return written_from(render_head(k + 1, false), trace.lookahead_output[k]);
    });

  for (size_t k = 0; k < n; ++k) {
    if (!assistant(k)) continue;
    std::optional<std::pair<size_t, size_t>> span;
    if (opener_of[k]) {
      const auto [begin, end] = trace.message_output[k];
      std::optional<size_t> from, to;
      if (const auto& opener = opener_of[k]->text; opener && has_at(full, begin, *opener))
        from = begin + opener->size();
      if (!tail_of[k]) {
        to = k + 1 == n ? full.size() : end;
      } else if (const auto& tail = tail_of[k]->text;
                 tail && has_at(full, trace.lookahead_output[k], *tail)) {
        to = trace.lookahead_output[k] + tail->size();
      }
      if (from && to && *from <= *to) span = std::pair{*from, *to};
    }
    r.assistant_spans.push_back(span ? *span : prefix_span(c, k, full, r.renders));
  }
  return r;
}

namespace {

// nlohmann's DOM builder, stopping at a number written as an integer that it would read as a
// float (beyond 64 bits).
struct ChatLineReader : nlohmann::detail::json_sax_dom_parser<nlohmann::ordered_json> {
  using json_sax_dom_parser::json_sax_dom_parser;
  bool number_float(double value, const std::string& text) {
    if (text.find_first_of(".eE") == std::string::npos)
      fail("the integer ", text.size() > 40 ? text.substr(0, 40) + "..." : text,
           " is beyond 64 bits: Python reads it exactly, gemmax's JSON reader as a float; "
           "write it as a string");
    return json_sax_dom_parser::number_float(value, text);
  }
};

}  // namespace

nlohmann::ordered_json parse_chat_line(const std::string& text) {
  nlohmann::ordered_json out;
  ChatLineReader reader(out);
  nlohmann::ordered_json::sax_parse(text, &reader);
  return out;
}

// Ids of rendered text: the template's bos/eos text become the special ids, the rest is encoded.
void encode_rendered(const Tokenizer& tok, const ChatTemplate& t, std::string_view text,
                     std::vector<int32_t>& ids) {
  while (!text.empty()) {
    size_t at = std::string_view::npos, len = 0;
    int32_t id = -1;
    for (auto [special, special_id] : {std::pair{std::string_view(t.bos_token()), tok.bos_id()},
                                       std::pair{std::string_view(t.eos_token()), tok.eos_id()}}) {
      if (special.empty() || special_id < 0) continue;
      const size_t p = text.find(special);
      if (p < at) {
        at = p;
        len = special.size();
        id = special_id;
      }
    }
    const std::vector<int32_t> plain = tok.encode(text.substr(0, at));
    ids.insert(ids.end(), plain.begin(), plain.end());
    if (at == std::string_view::npos) return;
    ids.push_back(id);
    text.remove_prefix(at + len);
  }
}

}  // namespace gemmax
