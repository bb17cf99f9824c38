// The tokenizer.json pipeline: reading the file, special ids from the folder's
// tokenizer_config.json, and encode/decode with the library's order of steps.
#include "gemmax/data/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/base/error.h"

namespace gemmax::hf {
namespace {

nlohmann::json read_json(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot read the ", what);
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": the ", what, " is not valid JSON (", e.what(),
         "); give the file as transformers saves it");
  }
}

AddedToken parse_added(const nlohmann::json& j, const Where& w) {
  AddedToken t;
  t.content = string_field(j, "content", w);
  const auto& id = field(j, "id", w);
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
    fail_at(w.at("id"), str_cat("expected a non-negative id, got ", id.dump()));
  t.id = int32_t(id.get<int64_t>());
  t.special = bool_field(j, "special", false, w);
  t.normalized = bool_field(j, "normalized", !t.special, w);
  t.lstrip = bool_field(j, "lstrip", false, w);
  t.rstrip = bool_field(j, "rstrip", false, w);
  t.single_word = bool_field(j, "single_word", false, w);
  return t;
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& path) : path_(path) {
  const nlohmann::json j = read_json(path, "tokenizer.json");
  const Where top{path, ""};
  if (!j.is_object()) fail(path, ": a tokenizer.json is a JSON object, got ", j.type_name());
  if (!j.contains("model") || j["model"].is_null())
    fail(path,
         ": the tokenizer.json has no \"model\"; it is not a whole tokenizer (save it with "
         "tokenizer.save() or transformers' save_pretrained)");
  for (const char* key : {"truncation", "padding"})
    if (j.contains(key) && !j[key].is_null())
      fail_at(top.at(key), "gemmax encodes whole documents and frames them itself; set it to null");
  const auto& model = j["model"];
  const std::string type = model.is_object() && model.contains("type") && model["type"].is_string()
                               ? model["type"].get<std::string>()
                               : "";
  if (type != "BPE")
    fail_at(top.at("model.type"),
            str_cat("the model \"", type.empty() ? model.dump().substr(0, 60) : type,
                    "\" is not supported (supported: BPE, as the Gemma family and transformers' "
                    "SentencePiece conversions use); gemmax does not approximate it"));
  model_ = std::make_unique<Bpe>(model, top.at("model"));
  if (j.contains("normalizer"))
    normalizer_ = parse_normalizer(j["normalizer"], top.at("normalizer"));
  if (j.contains("pre_tokenizer"))
    pre_tokenizer_ = parse_pre_tokenizer(j["pre_tokenizer"], top.at("pre_tokenizer"));
  if (j.contains("decoder")) decoder_ = parse_decoder(j["decoder"], top.at("decoder"));

  // Ids: the model's, then added tokens (which keep the model's id for a token it has).
  int64_t max_id = -1;
  for (const auto& [token, id] : model_->vocab()) max_id = std::max<int64_t>(max_id, id);
  std::vector<const std::string*> names(size_t(max_id + 1), nullptr);
  for (const auto& [token, id] : model_->vocab()) names[id] = &token;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    const auto& list = j["added_tokens"];
    if (!list.is_array()) fail_at(top.at("added_tokens"), "expected a list of tokens");
    for (size_t i = 0; i < list.size(); ++i)
      added_.push_back(parse_added(list[i], top.at("added_tokens").index(i)));
  }
  // The library numbers an added token outside model.vocab itself: after the vocabulary's
  // size, or after the highest added id; a file that says otherwise is refused, not obeyed.
  int64_t max_added = -1;
  const int64_t model_size = int64_t(model_->vocab().size());
  for (size_t i = 0; i < added_.size(); ++i) {
    AddedToken& t = added_[i];
    const Where w = top.at("added_tokens").index(i);
    int64_t id = model_->find(t.content);
    for (size_t k = 0; k < i && id < 0; ++k)
      if (added_[k].content == t.content) id = added_[k].id;
    if (id < 0)
      id = max_added < 0 ? model_size : max_added >= model_size ? max_added + 1 : model_size;
    if (id != t.id)
      fail_at(w, str_cat("token \"", t.content, "\" has id ", t.id,
                         " but the tokenizers library gives it ", id,
                         model_->find(t.content) >= 0 ? " (its id in model.vocab)"
                                                      : " (the next free id)",
                         "; the file is inconsistent: re-export it"));
    max_added = std::max(max_added, id);
    if (t.id >= int64_t(names.size())) names.resize(size_t(t.id) + 1, nullptr);
    names[t.id] = &t.content;
    added_by_id_[t.id] = i;
  }
  vocab_size_ = int64_t(names.size());
  id_to_token_.resize(names.size());
  for (size_t id = 0; id < names.size(); ++id)
    if (names[id]) id_to_token_[id] = *names[id];

  // The matchers: raw text for tokens with normalized=false, normalized text for the others.
  std::vector<const AddedToken*> raw, norm;
  std::vector<std::string> raw_p, norm_p;
  for (const AddedToken& t : added_) {
    if (t.normalized) {
      std::string p = t.content;
      if (normalizer_) normalizer_->normalize(p);
      id_to_token_[t.id] =
          p;  // the library decodes a normalized added token as its normalized text
      norm.push_back(&t);
      norm_p.push_back(std::move(p));
    } else {
      raw.push_back(&t);
      raw_p.push_back(t.content);
    }
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw), std::move(raw_p));
  normalized_matcher_ = AddedTokenMatcher(std::move(norm), std::move(norm_p));

  if (j.contains("post_processor") && !j["post_processor"].is_null()) {
    const auto& p = j["post_processor"];
    const Where w = top.at("post_processor");
    const std::string ptype = string_field(p, "type", w);
    if (ptype != "TemplateProcessing")
      fail_at(w, str_cat("the post-processor \"", ptype,
                         "\" is not supported (supported: TemplateProcessing); gemmax does not "
                         "approximate it"));
    const auto& specials = field(p, "special_tokens", w);
    const auto& single = field(p, "single", w);
    if (!single.is_array()) fail_at(w.at("single"), "expected a list of template pieces");
    bool seen = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const auto& e = single[i];
      const Where wi = w.at("single").index(i);
      if (e.is_object() && e.contains("Sequence")) {
        if (string_field(e["Sequence"], "id", wi) != "A")
          fail_at(wi, "a single-sequence template holds the sequence A only");
        if (seen) fail_at(wi, "the sequence appears twice in the template");
        seen = true;
      } else if (e.is_object() && e.contains("SpecialToken")) {
        const std::string name = string_field(e["SpecialToken"], "id", wi);
        if (!specials.is_object() || !specials.contains(name))
          fail_at(w.at("special_tokens"),
                  str_cat("has no \"", name, "\", which the template uses"));
        const auto& ids = field(specials[name], "ids", w.at("special_tokens").at(name));
        for (const auto& id : ids) {
          if (!id.is_number_unsigned() || id.get<int64_t>() >= vocab_size_)
            fail_at(w.at("special_tokens").at(name),
                    str_cat("id ", id.dump(), " is outside the vocabulary of ", vocab_size_));
          (seen ? template_.after : template_.before).push_back(id.get<int32_t>());
        }
      } else {
        fail_at(wi,
                str_cat("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got ", e.dump()));
      }
    }
    if (!seen) fail_at(w.at("single"), "the template has no sequence A: the text would be dropped");
    template_.present = true;
  }
  read_special_ids();
}

int32_t HfTokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return t.id;
  return model_->find(token);
}

// bos/eos/pad as transformers reads them: tokenizer_config.json, then special_tokens_map.json,
// beside the tokenizer.json; bos falls back to the post-processor's leading token.
void HfTokenizer::read_special_ids() {
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
    const std::string file = (dir / name).string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) continue;
    const nlohmann::json c = read_json(file, name);
    if (!c.is_object()) fail(file, ": expected a JSON object, got ", c.type_name());
    for (auto [key, slot] : {std::pair{"bos_token", &bos_}, std::pair{"eos_token", &eos_},
                             std::pair{"pad_token", &pad_}}) {
      if (!c.contains(key) || c[key].is_null()) continue;
      const auto& v = c[key];
      const Where w{file, key};
      std::string token;
      if (v.is_string())
        token = v.get<std::string>();
      else if (v.is_object() && v.contains("content") && v["content"].is_string())
        token = v["content"].get<std::string>();
      else
        fail_at(w, str_cat("expected a token string or {\"content\": ...}, got ", v.dump()));
      const int32_t id = token_to_id(token);
      if (id < 0)
        fail_at(w, str_cat("\"", token, "\" is not a token of ", path_,
                           "; the folder's files disagree: name a token the tokenizer has"));
      *slot = id;  // tokenizer_config.json, read second, has the last word
    }
  }
  if (bos_ < 0 && template_.before.size() == 1) bos_ = template_.before[0];
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  check_utf8(text, path_);
  std::vector<Piece> pieces, normalized, split;
  raw_matcher_.split(Piece{std::string(text), -1, true}, pieces);
  for (Piece& p : pieces) {
    if (p.id >= 0) {
      normalized.push_back(std::move(p));
      continue;
    }
    if (normalizer_) normalizer_->normalize(p.text);
    normalized_matcher_.split(std::move(p), normalized);
  }
  if (pre_tokenizer_) {
    for (Piece& p : normalized) {
      if (p.id >= 0)
        split.push_back(std::move(p));
      else
        pre_tokenizer_->split(std::move(p), split);
    }
  } else {
    split = std::move(normalized);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const Piece& p : split) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      model_->tokenize(p.text, ids);
  }
  return ids;
}

std::vector<int32_t> HfTokenizer::encode_with_special_tokens(std::string_view text) const {
  std::vector<int32_t> ids = template_.before;
  const std::vector<int32_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), template_.after.begin(), template_.after.end());
  return ids;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  // Special added tokens are skipped (transformers' skip_special_tokens=True); ids outside the
  // vocabulary become U+FFFD.
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_ || (id_to_token_[id].empty() && !added_by_id_.contains(id))) {
      tokens.emplace_back("\xEF\xBF\xBD");
      continue;
    }
    if (const auto it = added_by_id_.find(id);
        it != added_by_id_.end() && added_[it->second].special)
      continue;
    tokens.push_back(id_to_token_[id]);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string HfTokenizer::describe() const {
  return str_cat("huggingface '", path_, "' (vocab ", vocab_size_, ")");
}

}  // namespace gemmax::hf
