// A JSONL conversation reaches the template as transformers passes it: null keys dropped, the
// reasoning aliased, tools, documents and keyword arguments given; Python's Unicode whitespace;
// one rule for empty answers; the spans of a long conversation found in one render.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
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

std::string corpus_template(const std::string& name) {
  std::ifstream in(std::string(GEMMAX_SOURCE_DIR) + "/fuzz/corpus/chat_template_fuzz/" + name);
  EXPECT_TRUE(in) << name;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
std::string gemma4_template() { return corpus_template("gemma4.jinja"); }

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

// Agent conversations: tool calls (several a turn, with or without text and reasoning), their
// answers as tool messages (text or parts) or as Gemma 4's tool_responses, replies after the
// answers, calls left unanswered. The one render gives the plain way's spans, and learns what
// it needs once per kind of turn instead of rendering each turn's prefixes.
json agent_conversation(std::mt19937& rng) {
  auto pick = [&](int n) { return int(rng() % unsigned(n)); };
  const char* words[] = {"Paris", " the sum\u3000", "ok",      "",
                         "  ",    "こんにちは",     "<|turn>", "x\ny"};
  auto text = [&] { return std::string(words[pick(8)]) + words[pick(8)]; };
  json messages = json::array();
  if (pick(3) == 0) messages.push_back({{"role", "system"}, {"content", "Be brief."}});
  const int rounds = 1 + pick(4);
  for (int round = 0; round < rounds; ++round) {
    if (round > 0 || pick(8) != 0)  // a few open with the model's call
      messages.push_back({{"role", "user"}, {"content", "Question " + text()}});
    const int calls_in_a_row = pick(3);
    for (int turn = 0; turn < calls_in_a_row; ++turn) {
      json calls = json::array();
      const int n = 1 + pick(3);
      for (int c = 0; c < n; ++c)
        calls.push_back({{"id", "c" + std::to_string(c)},
                         {"type", "function"},
                         {"function",
                          {{"name", c % 2 ? "add" : "get_weather"},
                           {"arguments", pick(4) == 0 ? json("{\"a\": 1}")
                                                      : json{{"a", pick(100)}, {"b", text()}}}}}});
      json call = {{"role", "assistant"}, {"tool_calls", calls}};
      if (pick(6) == 0) call["content"] = "Let me check " + text();
      if (pick(8) == 0) call["content"] = "<|channel>thought\nhm<channel|>";
      if (pick(3) == 0) call["content"] = nullptr;
      if (pick(6) == 0) call["reasoning_content"] = "think " + text();
      const int shape = pick(5);
      if (shape == 0) {  // Gemma 4's own field
        call["tool_responses"] = json::array({{{"name", "add"}, {"response", {{"v", pick(9)}}}}});
        messages.push_back(call);
      } else {
        messages.push_back(call);
        const int answers = shape == 1 ? 0 : 1 + pick(n);
        for (int a = 0; a < answers; ++a) {
          json content = pick(3) == 0 ? json::array({{{"type", "text"}, {"text", text()}}})
                                      : json(text() + std::to_string(a));
          messages.push_back(
              {{"role", "tool"}, {"tool_call_id", "c" + std::to_string(a)}, {"content", content}});
        }
      }
    }
    if (calls_in_a_row == 0 || pick(4) != 0)
      messages.push_back({{"role", "assistant"}, {"content", "The answer: " + text()}});
  }
  json example = {{"messages", messages}};
  if (pick(2) == 0)
    example["tools"] = json::parse(R"([{"type": "function", "function": {"name": "add",
        "description": "Adds", "parameters": {"type": "object", "properties": {"a": {"type":
        "integer"}}, "required": ["a"]}}}])");
  return example;
}

TEST(ChatConversation, OneRenderSpansEqualPrefixRenderSpansInAgentConversations) {
  constexpr size_t npos = std::string::npos;
  std::mt19937 rng(7);
  size_t compared = 0, refused = 0, fewer_renders = 0;
  for (const auto [name, count] :
       {std::pair{"gemma4.jinja", 300}, {"gemma3.jinja", 100}, {"chatml.jinja", 100}}) {
    const ChatTemplate t(ChatTemplateSource{corpus_template(name), name});
    for (int k = 0; k < count; ++k) {
      const json example = agent_conversation(rng);
      const Conversation c = t.conversation(example);
      std::string plain_error, fast_error;
      RenderedChat plain, fast;
      try {
        plain = t.render(c, SpanSearch::kPrefixRenders);
      } catch (const Error& e) {
        plain_error = e.what();
      }
      try {
        fast = t.render(c, SpanSearch::kOneRender);
      } catch (const Error& e) {
        fast_error = e.what();
      }
      if (!plain_error.empty()) {
        ++refused;
        // The template refuses the conversation (Gemma 3 wants alternating roles): both fail.
        const bool split = plain_error.find("as an extension of the conversation") != npos;
        if (!split) {
          EXPECT_EQ(fast_error, plain_error) << name << " on " << example.dump();
          continue;
        }
        // A turn the plain way cannot tell apart: the one render fails as well, unless the
        // cause is the one it can place (Gemma 4 drops the reasoning of a turn before the last
        // user message once that message follows; the full render's turn is counted whole,
        // as transformers' mask would count it).
        const bool reasoning = example.dump().find("reasoning_content") != npos;
        EXPECT_TRUE(fast_error.find("as an extension") != npos || reasoning)
            << name << " on " << example.dump() << ": the one render gives spans the plain way "
            << "cannot";
        continue;
      }
      ASSERT_EQ(fast_error, "") << name << " on " << example.dump();
      EXPECT_EQ(fast.text, plain.text);
      EXPECT_EQ(fast.assistant_spans, plain.assistant_spans) << name << " on " << example.dump();
      fewer_renders += fast.renders < plain.renders;
      ++compared;
    }
  }
  EXPECT_GE(compared, 250u);
  EXPECT_GE(fewer_renders, 200u);
  std::printf("%zu agent conversations with equal spans (%zu in fewer renders), %zu refused\n",
              compared, fewer_renders, refused);
}

// A long agent conversation: a few renders, whatever its length.
TEST(ChatConversation, AgentConversationSpansTakeAFewRendersWhateverItsLength) {
  json messages = json::array();
  for (int k = 0; k < 80; ++k) {
    messages.push_back({{"role", "user"}, {"content", "What is " + std::to_string(k) + " + 1?"}});
    messages.push_back(
        {{"role", "assistant"},
         {"tool_calls",
          json::array({{{"id", "c"},
                        {"type", "function"},
                        {"function", {{"name", "add"}, {"arguments", {{"a", k}, {"b", 1}}}}}}})}});
    messages.push_back(
        {{"role", "tool"}, {"tool_call_id", "c"}, {"content", std::to_string(k + 1)}});
    messages.push_back(
        {{"role", "assistant"}, {"content", "It is " + std::to_string(k + 1) + "."}});
  }
  const Conversation c = gemma4().conversation(json{{"messages", messages}});
  const RenderedChat plain = gemma4().render(c, SpanSearch::kPrefixRenders);
  const RenderedChat fast = gemma4().render(c, SpanSearch::kOneRender);
  EXPECT_EQ(fast.assistant_spans, plain.assistant_spans);
  ASSERT_EQ(fast.assistant_spans.size(), 160u);
  // The tool call's text and the end marker the model writes to hand over to the tool.
  const auto [b, e] = fast.assistant_spans[2];
  EXPECT_EQ(fast.text.substr(b, e - b),
            "<|tool_call>call:add{a:1,b:1}<tool_call|><|tool_response>");
  EXPECT_EQ(plain.renders, 1u + 2 * 160);
  // The one render, the first turn's generation prompt (2), the reply's opener and the call's
  // end, each learned on its kind's first turn and checked on its last (4).
  EXPECT_EQ(fast.renders, 7u);
}

// Shapes an independent review found where learning by kind went wrong: an opener learned after
// a call's answer reused after a user's tool answer; a call's end learned from a thought-only
// call applied to a call with text; a reasoning call placed by where it stands; a user message
// with tool_responses. Each gives the plain way's spans, or fails as it does.
TEST(ChatConversation, OneRenderAgreesWithThePlainWayOnTheReviewsShapes) {
  const std::string u = R"({"role": "user", "content": "Q"})",
                    a = R"({"role": "assistant", "content": "Sure."})",
                    t = R"({"role": "tool", "tool_call_id": "c0", "content": "2"})",
                    calls = R"([{"id": "c0", "type": "function", "function": {"name": "add",
                                 "arguments": {"a": 1}}}])",
                    call = R"({"role": "assistant", "tool_calls": )" + calls + "}",
                    thought = R"({"role": "assistant", "content": "<|channel>thought\nhm<channel|>",
                                  "tool_calls": )" +
                              calls + "}",
                    with_text = R"({"role": "assistant", "content": "Let me check.",
                                    "tool_calls": )" +
                                calls + "}",
                    reasoning = R"({"role": "assistant", "reasoning_content": "think",
                                    "tool_calls": )" +
                                calls + "}",
                    user_answers = R"({"role": "user", "tool_responses": [{"name": "add",
                                       "response": {"v": 2}}]})";
  const std::vector<std::vector<std::string>> shapes = {
      {call, t, a, u, t, call, t, a},
      {u, thought, t, a, u, with_text, t, a, u, thought, t, a},
      {u, reasoning, t, a, u, call, t, a},
      {u, call, t, a, u, reasoning, t, a, u, call, t, a},
      {u, a, user_answers, a},
      {u, a, user_answers, call, t, a},
  };
  for (const auto& shape : shapes) {
    std::string line = R"({"messages": [)";
    for (size_t k = 0; k < shape.size(); ++k) line += (k ? ", " : "") + shape[k];
    line += "]}";
    const Conversation c = gemma4().conversation(json::parse(line));
    std::string plain_error, fast_error;
    RenderedChat plain, fast;
    try {
      plain = gemma4().render(c, SpanSearch::kPrefixRenders);
    } catch (const Error& e) {
      plain_error = e.what();
    }
    try {
      fast = gemma4().render(c, SpanSearch::kOneRender);
    } catch (const Error& e) {
      fast_error = e.what();
    }
    EXPECT_EQ(fast_error.empty(), plain_error.empty()) << line << ": " << fast_error << plain_error;
    EXPECT_EQ(fast.assistant_spans, plain.assistant_spans) << line;
  }
}

}  // namespace
}  // namespace gemmax
