// Conversations rendered as transformers renders them: the committed cases (made by
// jinja2_fixtures/make_cases.py with transformers' own apply_chat_template path) over the real
// templates, Unicode whitespace, null keys, tool calls and reasoning included; and the spans
// the loss counts, found in one render, equal to the plain way's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "gemmax/base/error.h"
#include "gemmax/data/chat_template.h"
#include "test_util.h"

namespace gemmax {
namespace {

using json = nlohmann::ordered_json;

std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::string(GEMMAX_SOURCE_DIR) + "/" + relative, std::ios::binary);
  EXPECT_TRUE(in) << relative;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Cases {
  json all;
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
};

const Cases& cases() {
  static const Cases c = [] {
    Cases c;
    const char* wide = std::getenv("GEMMAX_JINJA2_CASES");  // a wider file made outside CI
    std::ifstream in(wide ? std::string(wide)
                          : std::string(GEMMAX_SOURCE_DIR) +
                                "/tests/data/jinja2_fixtures/cases.json");
    c.all = json::parse(in);
    for (const auto& [name, t] : c.all["templates"].items()) {
      const std::string text = t.get<std::string>().ends_with(".jinja")
                                   ? read_source_file(t.get<std::string>())
                                   : t.get<std::string>();
      c.templates[name] = std::make_unique<ChatTemplate>(ChatTemplateSource{text, name});
    }
    return c;
  }();
  return c;
}

TEST(ChatTransformersCases, EveryCaseRendersAsTransformersDoes) {
  size_t compared = 0, refused = 0;
  for (const json& k : cases().all["cases"]) {
    const ChatTemplate& t = *cases().templates.at(k["template"].get<std::string>());
    std::string got, error;
    try {
      got = t.render_text(t.conversation(k["example"]), k["add_generation_prompt"].get<bool>());
    } catch (const Error& e) {
      error = e.what();
    }
    if (k.contains("error")) {
      EXPECT_FALSE(error.empty()) << "transformers fails (" << k["error"] << ") on "
                                  << k["example"].dump() << "; gemmax renders " << got;
      ++refused;
    } else {
      EXPECT_EQ(error, "") << k["example"].dump();
      EXPECT_EQ(got, k["text"].get<std::string>())
          << k["template"] << " on " << k["example"].dump();
      ++compared;
    }
  }
  EXPECT_GE(compared, 300u);  // the committed file: 360 cases, 27 refused by Gemma 3's template
  EXPECT_GE(refused, 1u);
}

// transformers' assistant mask is the text of the template's {% generation %} blocks.
TEST(ChatTransformersCases, GenerationBlocksGiveTransformersAssistantSpans) {
  size_t compared = 0;
  for (const json& k : cases().all["cases"]) {
    if (!k.contains("spans")) continue;
    const ChatTemplate& t = *cases().templates.at(k["template"].get<std::string>());
    const RenderedChat r = t.render(t.conversation(k["example"]));
    std::vector<std::pair<size_t, size_t>> want;
    for (const json& s : k["spans"])
      if (s[1].get<size_t>() > s[0].get<size_t>()) want.emplace_back(s[0], s[1]);
    EXPECT_EQ(r.assistant_spans, want) << k["example"].dump();
    ++compared;
  }
  EXPECT_GE(compared, 30u);
}

// The one-render search is the fast path; the prefix renders are the plain one. Where the plain
// one can tell the turns apart, both give the same spans.
TEST(ChatTransformersCases, OneRenderSpansEqualPrefixRenderSpans) {
  size_t compared = 0, fast_only = 0, refused = 0;
  for (const json& k : cases().all["cases"]) {
    if (k.contains("error") || k.contains("spans") || k["template"] == "generation") continue;
    const ChatTemplate& t = *cases().templates.at(k["template"].get<std::string>());
    const Conversation c = t.conversation(k["example"]);
    std::string plain_error;
    RenderedChat plain;
    try {
      plain = t.render(c, SpanSearch::kPrefixRenders);
    } catch (const Error& e) {
      plain_error = e.what();
    }
    try {
      const RenderedChat fast = t.render(c, SpanSearch::kOneRender);
      if (!plain_error.empty()) {
        // The template renders a turn differently once later turns follow (Gemma 4 drops the
        // reasoning of turns before the last user message): the plain way cannot tell the
        // turns apart; the one render counts what that render holds, as transformers' mask.
        EXPECT_NE(plain_error.find("as an extension of the conversation"), std::string::npos)
            << plain_error;
        ++fast_only;
        continue;
      }
      EXPECT_EQ(fast.text, plain.text);
      EXPECT_EQ(fast.assistant_spans, plain.assistant_spans)
          << k["template"] << " on " << k["example"].dump();
      ++compared;
    } catch (const Error& e) {
      // Where the one render falls back to the plain way, it fails as the plain way does.
      EXPECT_FALSE(plain_error.empty()) << e.what() << " on " << k["example"].dump();
      ++refused;
    }
  }
  EXPECT_GE(compared, 200u);
  std::printf(
      "%zu conversations with equal spans, %zu only the one render can split, %zu "
      "neither\n",
      compared, fast_only, refused);
}

}  // namespace
}  // namespace gemmax
