// The chat-template renderer's input: any text parsed as a Jinja template and rendered on a
// small conversation. Templates are code from model folders, so a hostile one must end in
// gemmax::Error (bounded output, recursion and ranges), never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gemmax/base/error.h"
#include "gemmax/data/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": " Hi \n"},
                 {"role": "assistant", "content": "Hello", "tool_calls": [{"function":
                   {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]}],
    "tools": [{"function": {"name": "f", "parameters": {"type": "object"}}}],
    "bos_token": "<bos>", "eos_token": "<eos>", "add_generation_prompt": true})");
  try {
    gemmax::jinja::Template t(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    t.render(context);
  } catch (const gemmax::Error&) {
  }
  return 0;
}
