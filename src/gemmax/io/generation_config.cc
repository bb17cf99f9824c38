#include "gemmax/io/generation_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/base/error.h"

namespace gemmax {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& where, const char* key, const json& v, const char* want) {
  std::string got = v.dump();
  if (got.size() > 60) got = got.substr(0, 57) + "...";
  fail(where, ": '", key, "' must be ", want, ", got ", got);
}

int32_t token_id(const std::string& where, const json& v) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    bad(where, "eos_token_id", v, "a token id (an integer >= 0) or a list of them");
  return int32_t(v.get<int64_t>());
}

}  // namespace

HfGenerationConfig parse_generation_config(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(where, ": not JSON (", e.what(), ")");
  }
  if (!j.is_object()) fail(where, ": expected a JSON object, got ", j.type_name());
  HfGenerationConfig g;
  // null means "not set" to transformers, as an absent field does.
  auto field = [&](const char* key) -> const json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("eos_token_id")) {
    if (v->is_array()) {
      for (const json& id : *v) g.eos_ids.push_back(token_id(where, id));
    } else {
      g.eos_ids.push_back(token_id(where, *v));
    }
  }
  if (const json* v = field("do_sample")) {
    if (!v->is_boolean()) bad(where, "do_sample", *v, "true or false");
    g.do_sample = v->get<bool>();
  }
  if (const json* v = field("temperature")) {
    if (!v->is_number() || v->get<double>() < 0) bad(where, "temperature", *v, "a number >= 0");
    g.temperature = v->get<double>();
  }
  if (const json* v = field("top_k")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0)
      bad(where, "top_k", *v, "an integer >= 0");
    g.top_k = v->get<int64_t>();
  }
  if (const json* v = field("top_p")) {
    if (!v->is_number() || v->get<double>() <= 0 || v->get<double>() > 1)
      bad(where, "top_p", *v, "a number in (0, 1]");
    g.top_p = v->get<double>();
  }
  return g;
}

std::optional<HfGenerationConfig> read_generation_config(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("'", path.string(), "': cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_generation_config(text.str(), "'" + path.string() + "'");
}

}  // namespace gemmax
