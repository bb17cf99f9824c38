#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gemmax/io/hf_config.h"
#include "test_util.h"

namespace gemmax {
namespace {

using json = nlohmann::json;
using testing::expect_error;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

// The released google/gemma-4-26b-a4b config.json, as reproduced in MaxText
// src/maxtext/checkpoint_conversion/utils/hf_model_configs.py (gemma4_26b_dict).
constexpr const char* kGemma4_26b = R"({
  "architectures": ["Gemma4ForConditionalGeneration"],
  "audio_config": null,
  "audio_token_id": 258881,
  "boa_token_id": 256000,
  "boi_token_id": 255999,
  "dtype": "bfloat16",
  "eoa_token_id": 258883,
  "eoa_token_index": 258883,
  "eoi_token_id": 258882,
  "eos_token_id": [1, 106],
  "image_token_id": 258880,
  "initializer_range": 0.02,
  "model_type": "gemma4",
  "text_config": {
    "attention_bias": false,
    "attention_dropout": 0.0,
    "attention_k_eq_v": true,
    "bos_token_id": 2,
    "dtype": "bfloat16",
    "enable_moe_block": true,
    "eos_token_id": 1,
    "moe_intermediate_size": 704,
    "final_logit_softcapping": 30.0,
    "global_head_dim": 512,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2816,
    "hidden_size_per_layer_input": 0,
    "initializer_range": 0.02,
    "intermediate_size": 2112,
    "layer_types": [
      "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
      "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
      "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
      "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
      "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"
    ],
    "max_position_embeddings": 262144,
    "model_type": "gemma4_text",
    "num_attention_heads": 16,
    "num_experts": 128,
    "num_global_key_value_heads": 2,
    "num_hidden_layers": 30,
    "num_key_value_heads": 8,
    "num_kv_shared_layers": 0,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {
      "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
      "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}
    },
    "sliding_window": 1024,
    "tie_word_embeddings": true,
    "top_k_experts": 8,
    "use_bidirectional_attention": "vision",
    "use_cache": true,
    "use_double_wide_mlp": false,
    "vocab_size": 262144,
    "vocab_size_per_layer_input": 262144
  },
  "tie_word_embeddings": true,
  "transformers_version": "5.5.0.dev0",
  "video_token_id": 258884,
  "vision_config": {
    "attention_bias": false,
    "attention_dropout": 0.0,
    "default_output_length": 280,
    "dtype": "bfloat16",
    "global_head_dim": 72,
    "head_dim": 72,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "max_position_embeddings": 131072,
    "model_type": "gemma4_vision",
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "patch_size": 16,
    "pooling_kernel_size": 3,
    "position_embedding_size": 10240,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 100.0, "rope_type": "default"},
    "standardize": true,
    "use_clipped_linears": false
  },
  "vision_soft_tokens_per_image": 280
})";

// The text decoder alone, as a Gemma4ForCausalLM config.json.
json text_only_26b() {
  json t = json::parse(kGemma4_26b)["text_config"];
  t["architectures"] = {"Gemma4ForCausalLM"};
  return t;
}

// docs/MODEL.md §1.
void expect_26b(const ModelConfig& c) {
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.d_model, 2816);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.global_num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.global_head_dim, 512);
  EXPECT_TRUE(c.share_kv_projections);
  EXPECT_EQ(c.mlp_dim, 2112);
  EXPECT_EQ(c.moe_mlp_dim, 704);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.sliding_window_pattern, 6);
  EXPECT_EQ(c.num_global_layers(), 5);
  EXPECT_TRUE(c.is_global(29));
  EXPECT_FALSE(c.layer_has_v_proj(5));
  EXPECT_EQ(c.local_rope_theta, 1e4);
  EXPECT_EQ(c.global_rope_theta, 1e6);
  EXPECT_EQ(c.local_rope_proportion, 1.0);
  EXPECT_EQ(c.global_rope_proportion, 0.25);
  EXPECT_EQ(c.final_logits_soft_cap, 30.0);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.initializer_range, 0.02);
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.global_num_kv_heads, b.global_num_kv_heads);
  EXPECT_EQ(a.global_head_dim, b.global_head_dim);
  EXPECT_EQ(a.mlp_dim, b.mlp_dim);
  EXPECT_EQ(a.moe_mlp_dim, b.moe_mlp_dim);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.sliding_window_pattern, b.sliding_window_pattern);
  EXPECT_EQ(a.local_rope_theta, b.local_rope_theta);
  EXPECT_EQ(a.global_rope_theta, b.global_rope_theta);
  EXPECT_EQ(a.local_rope_proportion, b.local_rope_proportion);
  EXPECT_EQ(a.global_rope_proportion, b.global_rope_proportion);
  EXPECT_EQ(a.share_kv_projections, b.share_kv_projections);
  EXPECT_EQ(a.final_logits_soft_cap, b.final_logits_soft_cap);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.load_balance_loss_weight, b.load_balance_loss_weight);
  EXPECT_EQ(a.initializer_range, b.initializer_range);
}

ModelConfig parse(const json& j, HfConfigInfo* info = nullptr) {
  return parse_hf_config(j.dump(), "test config", info);
}

// A small config unlike the released one in every field that can differ.
ModelConfig small_config() {
  ModelConfig c;
  c.name = "small";
  c.vocab_size = 259;
  c.d_model = 96;
  c.num_layers = 6;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 24;
  c.global_num_kv_heads = 2;
  c.global_head_dim = 48;
  c.mlp_dim = 160;
  c.moe_mlp_dim = 40;
  c.num_experts = 6;
  c.num_experts_per_tok = 3;
  c.sliding_window = 33;
  c.sliding_window_pattern = 3;
  c.local_rope_theta = 5000.5;
  c.global_rope_theta = 123456.0;
  c.local_rope_proportion = 0.5;
  c.global_rope_proportion = 1.0;
  c.share_kv_projections = false;
  c.final_logits_soft_cap = 0.0;
  c.norm_eps = 1e-5;
  c.initializer_range = 0.013;
  return c;
}

TEST(HfConfig, Released26bMapsToSpec) {
  TempDir dir;
  write_file(dir / "config.json", kGemma4_26b);
  HfConfigInfo info;
  const ModelConfig c = read_hf_config(dir / "config.json", &info);
  expect_26b(c);
  EXPECT_TRUE(info.multimodal);
  EXPECT_EQ(info.weight_prefix, "model.language_model.");
  EXPECT_TRUE(info.has_dtype);
  EXPECT_EQ(info.dtype, DType::BF16);
  EXPECT_FALSE(c.name.empty());
}

TEST(HfConfig, TextOnlyFormReadsTheSame) {
  HfConfigInfo info;
  const ModelConfig c = parse(text_only_26b(), &info);
  expect_26b(c);
  EXPECT_FALSE(info.multimodal);
  EXPECT_EQ(info.weight_prefix, "model.");
}

// transformers >= 5.15 saves the global-layer shape as per_layer_config and may leave out
// the flat keys and layer_types (its default pattern is 5 sliding + 1 full).
TEST(HfConfig, PerLayerConfigForm) {
  json t = text_only_26b();
  t.erase("global_head_dim");
  t.erase("num_global_key_value_heads");
  t.erase("layer_types");
  json plc = json::object();
  for (int l = 5; l < 30; l += 6)
    plc[l < 10 ? "0" + std::to_string(l) : std::to_string(l)] = {{"head_dim", 512},
                                                                 {"num_key_value_heads", 2}};
  t["per_layer_config"] = plc;
  expect_26b(parse(t));

  json bad = t;
  bad["per_layer_config"]["11"]["head_dim"] = 256;
  expect_error([&] { parse(bad); }, {"global layer 11", "unlike the first global layer"});
  bad = t;
  bad["per_layer_config"]["03"] = {{"head_dim", 512}};
  expect_error([&] { parse(bad); }, {"sliding layer 3"});
  bad = t;
  bad["per_layer_config"]["05"]["sliding_window"] = 7;
  expect_error([&] { parse(bad); }, {"per_layer_config.05.sliding_window", "not supported"});
  bad = t;
  bad["global_head_dim"] = 128;
  expect_error([&] { parse(bad); }, {"global_head_dim 128 disagrees"});
}

// Verbatim from transformers 5.24.0: Gemma4ForCausalLM.save_pretrained of the model it built
// from the config.json that write_hf_config wrote for a small K = V model (global layers 2 and
// 5 with head_dim 48 and one KV head). It moves the global shape into per_layer_config.
constexpr const char* kSavedByTransformers = R"({
  "architectures": ["Gemma4ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attention_k_eq_v": true,
  "bos_token_id": 2,
  "dtype": "float32",
  "enable_moe_block": true,
  "eos_token_id": 1,
  "final_logit_softcapping": 20.0,
  "head_dim": 24,
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 96,
  "hidden_size_per_layer_input": 0,
  "initializer_range": 0.013,
  "intermediate_size": 160,
  "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "sliding_attention", "full_attention"],
  "max_position_embeddings": 262144,
  "model_type": "gemma4_text",
  "moe_intermediate_size": 40,
  "num_attention_heads": 4,
  "num_experts": 6,
  "num_hidden_layers": 6,
  "num_key_value_heads": 2,
  "num_kv_shared_layers": 0,
  "pad_token_id": 0,
  "per_layer_config": {
    "2": {"head_dim": 48, "num_key_value_heads": 1},
    "5": {"head_dim": 48, "num_key_value_heads": 1}
  },
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "full_attention": {"partial_rotary_factor": 0.5, "rope_theta": 123456.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 5000.5, "rope_type": "default"}
  },
  "sliding_window": 33,
  "tie_word_embeddings": true,
  "top_k_experts": 3,
  "transformers_version": "5.24.0",
  "use_bidirectional_attention": null,
  "use_cache": true,
  "use_double_wide_mlp": false,
  "vocab_size": 259,
  "vocab_size_per_layer_input": 259
})";

TEST(HfConfig, ReadsWhatTransformersSaves) {
  ModelConfig want = small_config();
  want.name = "";
  want.global_num_kv_heads = 1;
  want.local_rope_proportion = 1.0;
  want.global_rope_proportion = 0.5;
  want.share_kv_projections = true;
  want.final_logits_soft_cap = 20.0;
  HfConfigInfo info;
  expect_same(parse_hf_config(kSavedByTransformers, "saved", &info), want);
  EXPECT_EQ(info.dtype, DType::F32);
}

TEST(HfConfig, WriteReadRoundTrip) {
  TempDir dir;
  ModelConfig big = parse(text_only_26b());
  big.name = "big";
  for (ModelConfig cfg : {big, small_config()}) {
    const std::string folder = dir / cfg.name;
    std::filesystem::create_directories(folder);
    cfg.name = std::filesystem::path(folder).filename().string();
    write_hf_config(cfg, DType::BF16, folder + "/config.json");
    HfConfigInfo info;
    const ModelConfig back = read_hf_config(folder + "/config.json", &info);
    expect_same(back, cfg);
    EXPECT_FALSE(info.multimodal);
    EXPECT_EQ(info.dtype, DType::BF16);
  }
  // The written form carries every key transformers needs, with gemmax's fixed choices.
  const json j = json::parse(hf_config_json(small_config(), DType::F32));
  EXPECT_EQ(j["architectures"], json::array({"Gemma4ForCausalLM"}));
  EXPECT_EQ(j["model_type"], "gemma4_text");
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_EQ(j["enable_moe_block"], true);
  EXPECT_EQ(j["hidden_size_per_layer_input"], 0);
  EXPECT_EQ(j["num_kv_shared_layers"], 0);
  EXPECT_EQ(j["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_TRUE(j["final_logit_softcapping"].is_null());
  EXPECT_EQ(j["layer_types"][2], "full_attention");
  EXPECT_EQ(j["layer_types"][3], "sliding_attention");
  EXPECT_EQ(j["rope_parameters"]["sliding_attention"]["rope_type"], "proportional");
  EXPECT_EQ(j["rope_parameters"]["sliding_attention"]["partial_rotary_factor"], 0.5);
  EXPECT_EQ(j["rope_parameters"]["full_attention"]["rope_type"], "proportional");
  const json r = json::parse(hf_config_json(big, DType::BF16));
  EXPECT_EQ(r["rope_parameters"], json::parse(kGemma4_26b)["text_config"]["rope_parameters"]);
  EXPECT_EQ(r["layer_types"], json::parse(kGemma4_26b)["text_config"]["layer_types"]);
  EXPECT_EQ(r["attention_k_eq_v"], true);
  EXPECT_EQ(r["num_global_key_value_heads"], 2);
}

// The dense layer (gemma4-31b): enable_moe_block false, the MoE keys null; gemmax's num_experts=1.
TEST(HfConfig, DenseLayerReadAndWritten) {
  json t = text_only_26b();
  t["enable_moe_block"] = false;
  for (const char* key : {"num_experts", "top_k_experts", "moe_intermediate_size"}) t[key] = nullptr;
  const ModelConfig dense = parse(t);
  EXPECT_FALSE(dense.has_moe());
  EXPECT_EQ(dense.num_experts, 1);
  EXPECT_EQ(dense.mlp_dim, 2112);
  TempDir dir;
  ModelConfig cfg = small_config();
  cfg.num_experts = 1;
  cfg.num_experts_per_tok = 1;
  cfg.moe_mlp_dim = 0;
  cfg.name = "dense";
  std::filesystem::create_directories(dir / "dense");
  write_hf_config(cfg, DType::BF16, dir / "dense/config.json");
  const ModelConfig back = read_hf_config(dir / "dense/config.json");
  expect_same(back, cfg);
  EXPECT_EQ(back.shape_difference(cfg), "");
  const json j = json::parse(hf_config_json(cfg, DType::F32));
  EXPECT_EQ(j["enable_moe_block"], false);
  EXPECT_TRUE(j["num_experts"].is_null());
  EXPECT_TRUE(j["top_k_experts"].is_null());
  // A MoE block of one expert is neither layer.
  t["enable_moe_block"] = true;
  t["num_experts"] = 1;
  t["top_k_experts"] = 1;
  t["moe_intermediate_size"] = 704;
  expect_error([&] { parse(t); }, {"enable_moe_block is true with num_experts 1"});
}

TEST(HfConfig, WriterRefusesWhatTransformersCannotExpress) {
  TempDir dir;
  ModelConfig c = small_config();
  c.norm_topk_prob = false;
  expect_error([&] { write_hf_config(c, DType::BF16, dir / "config.json"); }, {"norm_topk_prob"});
  c = small_config();
  c.num_layers = 7;
  expect_error([&] { hf_config_json(c, DType::BF16); },
               {"last layer (6) is a sliding layer", "transformers' Gemma 4 cannot hold"});
  c = small_config();
  c.global_num_kv_heads = 1;
  expect_error([&] { hf_config_json(c, DType::BF16); }, {"K = V", "num_key_value_heads"});
  expect_error([&] { hf_config_json(small_config(), DType::I32); }, {"float type"});
  EXPECT_TRUE(dir.list().empty());
  // The trainer refuses the same shapes through hf_export_refusal; a dense model has no
  // router, so its norm_topk_prob does not matter.
  c = small_config();
  c.norm_topk_prob = false;
  EXPECT_NE(hf_export_refusal(c), "");
  c.num_experts = 1;
  EXPECT_EQ(hf_export_refusal(c), "");
  EXPECT_NE(hf_config_json(c, DType::BF16), "");
}

TEST(HfConfig, MissingAndMistypedKeys) {
  TempDir dir;
  json t = text_only_26b();
  t.erase("hidden_size");
  write_file(dir / "config.json", t.dump());
  expect_error([&] { read_hf_config(dir / "config.json"); },
               {dir / "config.json", "missing required key 'hidden_size'"});
  t = text_only_26b();
  t["hidden_size"] = 2816.0;
  expect_error([&] { parse(t); }, {"'hidden_size'", "an integer", "2816.0"});
  t = text_only_26b();
  t.erase("num_global_key_value_heads");
  expect_error([&] { parse(t); }, {"num_global_key_value_heads"});
  t = text_only_26b();
  t["attention_k_eq_v"] = "yes";
  expect_error([&] { parse(t); }, {"'attention_k_eq_v'", "true or false"});
  expect_error([&] { parse_hf_config("{not json", "x.json"); }, {"x.json", "not valid JSON"});
  expect_error([&] { parse(json{{"model_type", "llama"}}); }, {"\"llama\"", "not Gemma 4"});
  expect_error([&] { parse(json{{"model_type", "gemma4"}}); }, {"text_config"});
  expect_error([&] { read_hf_config(dir / "nope.json"); }, {"nope.json"});
  t = text_only_26b();
  t["num_key_value_heads"] = 3;  // not a divisor of 16 query heads: ModelConfig::validate
  expect_error([&] { parse(t); }, {"test config", "multiple of base_num_kv_heads"});
}

// Found by fuzzing (fuzz/hf_config_fuzz): sizes whose products overflow 64 bits reached the
// parameter table (signed overflow in the shape arithmetic). They are refused, as are
// non-finite numbers.
TEST(HfConfig, HugeSizesAndNonFiniteNumbersAreRefused) {
  json t = text_only_26b();
  t["vocab_size"] = int64_t(1) << 62;
  t["hidden_size"] = int64_t(1) << 40;
  expect_error([&] { parse(t); }, {"vocab_size", "above the limit"});
  t = text_only_26b();
  t["num_experts"] = 1 << 24;
  t["moe_intermediate_size"] = 1 << 24;
  expect_error([&] { parse(t); }, {"parameters", "more than"});
  t = text_only_26b();
  t["rms_norm_eps"] = -1.0;
  expect_error([&] { parse(t); }, {"normalization_layer_epsilon", "finite non-negative"});
}

TEST(HfConfig, UnsupportedFeaturesAreNamed) {
  struct Case {
    const char* key;
    json value;
    const char* expect;
  };
  const Case cases[] = {
      {"attention_bias", true, "bias"},
      {"hidden_activation", "gelu", "gelu_pytorch_tanh"},
      {"tie_word_embeddings", false, "ties"},
      {"use_bidirectional_attention", "all", "causal"},
      {"attention_dropout", 0.1, "dropout"},
  };
  for (const Case& cs : cases) {
    json t = text_only_26b();
    t[cs.key] = cs.value;
    expect_error([&] { parse(t); }, {std::string(cs.key) + " = " + cs.value.dump(), cs.expect});
  }
  json t = text_only_26b();
  t.erase("hidden_size_per_layer_input");  // transformers' default is 256: the small block's
  expect_error([&] { parse(t); }, {"hidden_size_per_layer_input 256", "dense layer only"});
  t = json::parse(kGemma4_26b);
  t["tie_word_embeddings"] = false;  // the multimodal wrapper's own flag
  expect_error([&] { parse(t); }, {"tie_word_embeddings = false"});
}

// Any layer_types list transformers accepts loads (a pruned or distilled model's is not
// periodic), with its last layer full attention as transformers makes it; a periodic list is
// kept as the pattern, and every list survives the writer.
TEST(HfConfig, AnyLayerTypesListLoadsAndRoundTrips) {
  json t = text_only_26b();
  t["layer_types"][11] = "sliding_attention";
  t["layer_types"][8] = "full_attention";
  ModelConfig c = parse(t);
  EXPECT_NE(c.layer_types, "");
  for (int64_t l = 0; l < 30; ++l)
    EXPECT_EQ(c.is_global(l), t["layer_types"][size_t(l)] == "full_attention") << l;
  EXPECT_EQ(c.num_global_layers(), 5);
  // The writer lists the same kinds, and reading them back gives the same shape.
  const ModelConfig back = parse_hf_config(hf_config_json(c, DType::BF16), "back");
  EXPECT_EQ(back.shape_difference(c), "");
  EXPECT_EQ(json::parse(hf_config_json(c, DType::BF16))["layer_types"], t["layer_types"]);
  // A sliding last layer is made full, as transformers' Gemma4TextConfig does.
  t = text_only_26b();
  t["layer_types"][29] = "sliding_attention";
  EXPECT_TRUE(parse(t).is_global(29));
  EXPECT_EQ(parse(t).layer_types, "");  // then periodic again
  t = text_only_26b();
  t["layer_types"][0] = "chunked_attention";
  expect_error([&] { parse(t); }, {"layer_types[0]", "chunked_attention"});
  t = text_only_26b();
  t["layer_types"].erase(0);
  expect_error([&] { parse(t); }, {"29 entries", "num_hidden_layers is 30"});
  // Every layer global: period 1.
  t = text_only_26b();
  t["layer_types"] = json(std::vector<std::string>(30, "full_attention"));
  t.erase("rope_parameters");  // transformers' default
  c = parse(t);
  EXPECT_EQ(c.sliding_window_pattern, 1);
  EXPECT_EQ(c.layer_types, "");
  EXPECT_EQ(c.global_rope_proportion, 0.25);
}

// The key itself: one entry per layer, each a kind transformers names.
TEST(HfConfig, LayerTypesKeyIsChecked) {
  ModelConfig c = small_config();  // 6 layers
  const std::string s = "sliding_attention,", f = "full_attention";
  c.layer_types = s + f + "," + s + s + f + "," + f;
  c.validate();
  EXPECT_EQ(c.num_global_layers(), 3);
  EXPECT_TRUE(c.is_global(1) && c.is_global(4) && c.is_global(5));
  c.layer_types = s + "global," + s + s + s + f;
  expect_error([&] { c.validate(); }, {"layer_types entry 1 is 'global'", "full_attention"});
  c.layer_types = s + f;
  expect_error([&] { c.validate(); }, {"layer_types lists 2 layers", "base_num_decoder_layers is 6"});
}

TEST(HfConfig, RopeParameters) {
  json t = text_only_26b();
  t["rope_parameters"]["sliding_attention"]["rope_type"] = "yarn";
  expect_error([&] { parse(t); }, {"rope_parameters.sliding_attention.rope_type", "yarn"});
  t = text_only_26b();
  t["rope_parameters"]["sliding_attention"]["partial_rotary_factor"] = 0.5;
  expect_error([&] { parse(t); }, {"partial_rotary_factor", "ignores it"});
  t = text_only_26b();
  t["rope_parameters"]["sliding_attention"] = {
      {"rope_type", "proportional"}, {"partial_rotary_factor", 0.5}, {"rope_theta", 10000.0}};
  EXPECT_EQ(parse(t).local_rope_proportion, 0.5);
  t = text_only_26b();
  t["rope_parameters"]["full_attention"]["factor"] = 8.0;
  expect_error([&] { parse(t); }, {"rope_parameters.full_attention.factor", "scaling"});
  t = text_only_26b();
  t["rope_parameters"]["full_attention"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  expect_error([&] { parse(t); }, {"full_attention.rope_type", "global_head_dim"});
  t = text_only_26b();
  t["rope_parameters"].erase("sliding_attention");
  expect_error([&] { parse(t); }, {"no \"sliding_attention\" entry"});
  t = text_only_26b();
  t["rope_parameters"]["full_attention"].erase("rope_theta");
  expect_error([&] { parse(t); }, {"rope_parameters.full_attention.rope_theta"});
  t = text_only_26b();
  t["final_logit_softcapping"] = nullptr;
  EXPECT_EQ(parse(t).final_logits_soft_cap, 0.0);
  t["final_logit_softcapping"] = 0.0;
  expect_error([&] { parse(t); }, {"final_logit_softcapping must be positive, or null"});
}

}  // namespace
}  // namespace gemmax
