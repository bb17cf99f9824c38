// A JSONL conversation reaches the template as transformers passes it: null keys dropped, the
// reasoning aliased, tools, documents and keyword arguments given; Python's Unicode whitespace;
// one rule for empty answers; the spans of a long conversation found in one render.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gemmax/base/error.h"
#include "gemmax/data/chat_template.h"
#include "gemmax/data/tokenize_files.h"
#include "test_util.h"

namespace gemmax {
namespace {

using json = nlohmann::ordered_json;
using testing::TempDir;

std::string gemma4_template() {
  std::ifstream in(std::string(GEMMAX_SOURCE_DIR) + "/fuzz/corpus/chat_template_fuzz/gemma4.jinja");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ChatTemplate& gemma4() {
  static const ChatTemplate t(ChatTemplateSource{gemma4_template(), "gemma4.jinja"});
  return t;
}

std::string render(const ChatTemplate& t, const std::string& line, bool gen = false) {
  return t.render_text(t.conversation(json::parse(line)), gen);
}

// transformers strips a Japanese turn's trailing U+3000 (Python's strip is Unicode's).
TEST(ChatConversation, TrimRemovesPythonsUnicodeWhitespace) {
  const std::string text = render(
      gemma4(),
      R"({"messages": [{"role": "user", "content": "\u3000こんにちは\u3000\u00a0\u2028"}]})");
  EXPECT_NE(text.find("<|turn>user\nこんにちは<turn|>"), std::string::npos) << text;
  const ChatTemplate t(
      ChatTemplateSource{"{{ x.split() | tojson }}|{{ x.strip() }}|{{ x.split(none, 1) | tojson "
                         "}}|{{ x | wordcount }}",
                         "t"});
  EXPECT_EQ(render(t, R"({"messages": [{"role": "user", "content": "q"}],
                         "chat_template_kwargs": {"x": "\u3000a\u00a0b\u2029c\u0085 "}})"),
            "[\"a\", \"b\", \"c\"]|a\u00a0b\u2029c|[\"a\", \"b\u2029c\u0085 \"]|3");
}

// lstrip_blocks strips what Python's \s matches before a block or comment tag, as jinja2's
// lexer does: Unicode's whitespace as well as spaces and tabs.
TEST(ChatConversation, LstripBlocksRemovesPythonsUnicodeWhitespace) {
  const std::string line = R"({"messages": [{"role": "user", "content": "q"}]})";
  auto rendered = [&](const std::string& text) {
    return render(ChatTemplate(ChatTemplateSource{text, "t"}), line);
  };
  // What jinja2 renders with transformers' trim_blocks and lstrip_blocks.
  EXPECT_EQ(rendered("X\n\u3000 {% if true %}Y{% endif %}"), "X\nY");
  EXPECT_EQ(rendered("\u00a0\u2028{% if true %}Y{% endif %}"), "Y");
  EXPECT_EQ(rendered("X\n \u0085\u3000{# c #}Z"), "X\nZ");
  EXPECT_EQ(rendered("X\n\u3000a {% if true %}Y{% endif %}"), "X\n\u3000a Y");
  EXPECT_EQ(rendered("X\n\u3000{{ 1 }}"), "X\n\u30001");
  EXPECT_EQ(rendered("X\n\x1c\x0b{%+ if true %}Y{% endif %}"), "X\n\x1c\x0bY");
}

TEST(ChatConversation, NullKeysAreDroppedAsTransformersDoes) {
  const ChatTemplate t(ChatTemplateSource{
      "{% for m in messages %}{{ m.role }}:{{ 'tool_calls' in m }}:{{ m.content }};{% endfor %}",
      "t"});
  EXPECT_EQ(render(t, R"({"messages": [{"role": "user", "content": "q", "tool_calls": null},
                                       {"role": "assistant", "content": null}]})"),
            "user:False:q;assistant:False:;");
  // The reasoning under any of its names fills all three, as transformers aliases it.
  const ChatTemplate r(
      ChatTemplateSource{"{% for m in messages %}{{ m | tojson }}{% endfor %}", "t"});
  EXPECT_EQ(render(r, R"({"messages": [{"role": "assistant", "reasoning": "r", "content": "a"}]})"),
            R"({"thinking": "r", "role": "assistant", "reasoning": "r", "content": "a", )"
            R"("reasoning_content": "r"})");
}

TEST(ChatConversation, ToolsDocumentsAndKeywordArgumentsReachTheTemplate) {
  const std::string line = R"({"messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "assistant", "content": "Sunny."}],
      "tools": [{"type": "function", "function": {"name": "get_weather",
       "description": "Weather of a city", "parameters": {"type": "object", "properties": {
       "city": {"type": "string"}}}}}], "id": "row-7"})";
  const std::string text = render(gemma4(), line);
  EXPECT_NE(text.find("declaration:get_weather"), std::string::npos) << text;
  EXPECT_NE(text.find("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}"), std::string::npos);
  // Absent tools and documents are None, as transformers passes them.
  const ChatTemplate t(
      ChatTemplateSource{"{{ tools is none }}{{ documents is none }}{{ enable_thinking }}", "t"});
  EXPECT_EQ(render(t, R"({"messages": [{"role": "user", "content": "q"}], "id": 3,
                         "chat_template_kwargs": {"enable_thinking": true}})"),
            "TrueTrueTrue");
  // A key of the line the template reads by name reaches it.
  EXPECT_EQ(render(t, R"({"messages": [{"role": "user", "content": "q"}], "enable_thinking": 5})"),
            "TrueTrue5");
  testing::expect_error(
      [&] {
        render(t, R"({"messages": [{"role": "user", "content": "q"}],
                      "chat_template_kwargs": {"add_generation_prompt": true}})");
      },
      {"\"chat_template_kwargs\" sets \"add_generation_prompt\""});
  testing::expect_error(
      [&] { render(t, R"({"messages": [{"role": "user"}], "chat_template_kwargs": [1]})"); },
      {"\"chat_template_kwargs\" is array"});
}

// {% generation %} blocks are transformers' assistant mask: their text is what counts.
TEST(ChatConversation, GenerationBlocksMarkTheCountedText) {
  const ChatTemplate t(ChatTemplateSource{
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
      "{{ m.content }}</a>{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
      "t"});
  const RenderedChat r = t.render(t.conversation(json::parse(
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "A"},
          {"role": "user", "content": "r"}, {"role": "assistant", "content": "B"}]})")));
  EXPECT_EQ(r.text, "<user>q<assistant>A</a><user>r<assistant>B</a>");
  ASSERT_EQ(r.assistant_spans.size(), 2u);
  EXPECT_EQ(r.text.substr(r.assistant_spans[0].first,
                          r.assistant_spans[0].second - r.assistant_spans[0].first),
            "A</a>");
  const ChatTemplate in_macro(ChatTemplateSource{
      "{% macro f() %}{% generation %}x{% endgeneration %}{% endmacro %}{{ f() }}", "t"});
  testing::expect_error(
      [&] {
        in_macro.render(in_macro.conversation(json::parse(
            R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant"}]})")));
      },
      {"inside a macro or a set block"});
}

struct Shards {
  TempDir dir;
  std::string tokenize(const std::string& lines, bool by_prefix = false) {
    testing::write_file(dir / "t.jinja", gemma4_template());
    testing::write_file(dir / "in.jsonl", lines);
    TokenizeOptions o;
    o.inputs = {dir / "in.jsonl"};
    o.out = dir / "out.bin";
    std::filesystem::remove(o.out);
    o.chat_template_path = dir / "t.jinja";
    o.chat_spans_by_prefix_renders = by_prefix;
    tokenize_files(o);
    return testing::read_file(o.out);
  }
};

// "", blanks, null and [] all render the same answer in Gemma 4: one rule, the turn kept with
// its closing text counted. An assistant tool call needs no content.
TEST(ChatConversation, EmptyAnswersFollowOneRule) {
  Shards s;
  std::string first;
  for (const char* empty : {R"("")", R"("   ")", "null", "[]"}) {
    const std::string shard = s.tokenize(
        std::string(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", )") +
        R"("content": )" + empty + "}]}\n");
    if (first.empty()) first = shard;
    EXPECT_EQ(shard, first) << empty;
  }
  s.tokenize(
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]})"
      "\n");
}

// A long conversation: the one render finds the same masks as two renders a turn.
TEST(ChatConversation, OneRenderMasksEqualPrefixRenderMasksOnALongConversation) {
  json messages = json::array({{{"role", "system"}, {"content", "Be brief.\u3000"}}});
  for (int k = 0; k < 60; ++k) {
    messages.push_back({{"role", "user"}, {"content", "Question " + std::to_string(k) + " "}});
    if (k % 7 == 3) {
      messages.push_back({{"role", "assistant"},
                          {"content", nullptr},
                          {"tool_calls", json::parse(R"([{"id": "c", "function": {"name": "f",
                                          "arguments": {"n": 1}}}])")}});
      messages.push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", "ok"}});
    }
    messages.push_back({{"role", "assistant"}, {"content", " Answer " + std::to_string(k)}});
  }
  Shards s;
  const std::string line = json{{"messages", messages}}.dump() + "\n";
  EXPECT_EQ(s.tokenize(line, false), s.tokenize(line, true));
}

}  // namespace
}  // namespace gemmax
