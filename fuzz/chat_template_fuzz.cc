// The chat-template renderer's input: any text parsed as a Jinja template and rendered on a
// conversation as tokenize renders it (the spans of its assistant turns found in one traced
// render, or the plain way). Templates are code from model folders, so a hostile one must end
// in gemmax::Error (bounded memory, steps, output, nesting and chains), never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gemmax/base/error.h"
#include "gemmax/data/chat_template.h"

namespace {

// A system prompt, tools, a tool call and its response, reasoning, null keys, Unicode
// whitespace, and enough turns that quadratic work shows.
nlohmann::ordered_json example() {
  nlohmann::ordered_json e = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief.\u3000"},
                 {"role": "user", "content": " Hi \n"},
                 {"role": "assistant", "content": null, "reasoning": "think", "tool_calls":
                   [{"id": "c1", "function": {"name": "f",
                     "arguments": {"a": 1, "b": [true, null, 2.5]}}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                 {"role": "assistant", "content": "Hello", "tool_calls": null}],
    "tools": [{"function": {"name": "f", "parameters": {"type": "object"}}}],
    "chat_template_kwargs": {"enable_thinking": true}})");
  for (int k = 0; k < 20; ++k) {
    e["messages"].push_back({{"role", "user"}, {"content", "q" + std::to_string(k)}});
    e["messages"].push_back({{"role", "assistant"}, {"content", "a\u00a0" + std::to_string(k)}});
  }
  return e;
}

// The first turns only: the prefix rule renders 2N+1 times, and each render may spend the bounds.
nlohmann::ordered_json shortened(nlohmann::ordered_json e) {
  e["messages"].erase(e["messages"].begin() + 5, e["messages"].end());
  return e;
}

// The same bounds as tokenize, smaller: a runaway render reaches them in well under a second
// under the sanitizers, so every bound's error path runs. One input renders up to 47 times (the
// long conversation's turns that the trace does not place are found by prefix renders), and a
// step costs up to about 1 us under the sanitizers: 50,000 steps (twice what Gemma 4's
// template takes on the long conversation) keep an input within a few seconds, far from
// libFuzzer's 25 s timeout on a loaded machine.
gemmax::jinja::Limits fuzz_limits() {
  gemmax::jinja::Limits limits;
  limits.max_bytes = int64_t(16) << 20;
  limits.max_steps = 50'000;
  limits.max_output = int64_t(4) << 20;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json one_render = example();
  static const nlohmann::ordered_json prefix_renders = shortened(one_render);
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool one = size % 2;
  try {
    const gemmax::ChatTemplate t(gemmax::ChatTemplateSource{text, "fuzz"}, fuzz_limits());
    const gemmax::Conversation c = t.conversation(one ? one_render : prefix_renders);
    t.render(c, one ? gemmax::SpanSearch::kOneRender : gemmax::SpanSearch::kPrefixRenders);
  } catch (const gemmax::Error&) {
  }
  return 0;
}
