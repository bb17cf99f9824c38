// Hugging Face model folders <-> the parameter registry: round trip and every bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/checkpoint/hf_model.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::TempDir;

struct Folder {
  ModelConfig cfg = testing::small_test_config(2);
  ParamTable table{cfg};
  Tensor weights = Tensor::empty({table.total()}, DType::F32);
  TempDir dir;

  Folder() { init_params(table, weights, 3); }
  explicit Folder(const ModelConfig& c) : cfg(c) { init_params(table, weights, 3); }
  // Writes config.json and the weights, optionally edited.
  void write(const std::function<void(NamedTensors&)>& edit = {},
             const std::string& prefix = "model.", DType dtype = DType::F32) {
    NamedTensors t = hf_named_tensors(table, weights, prefix, dtype);
    if (edit) edit(t);
    write_hf_checkpoint(dir.str(), t, 1 << 30);
    write_hf_config(cfg, dtype, dir / "config.json");
  }
  Tensor load(std::string* note = nullptr) {
    const HfModelFolder f = read_hf_model_folder(dir.str());
    const ParamTable t(f.config);
    Tensor w = Tensor::zeros({t.total()}, DType::F32);
    const std::string n = load_hf_weights(t, f, w);
    if (note) *note = n;
    return w;
  }
};

TEST(HfModel, RoundTripIsBitExact) {
  Folder f;
  f.write();
  const Tensor w = f.load();
  EXPECT_EQ(0, std::memcmp(w.raw(), f.weights.raw(), w.nbytes()));
  // The config read back describes the same model.
  const ModelConfig back = read_hf_model_folder(f.dir.str()).config;
  EXPECT_EQ(ParamTable(back).total(), f.table.total());
  EXPECT_TRUE(back.is_global(1));
  EXPECT_FALSE(back.layer_has_v_proj(1));
}

// The dense layer (gemma4-31b): the folder holds the MLP alone and reads back as dense.
TEST(HfModel, DenseRoundTripIsBitExact) {
  ModelConfig c = testing::small_test_config(2);
  c.num_experts = 1;
  Folder f(c);
  f.write();
  const Tensor w = f.load();
  EXPECT_EQ(0, std::memcmp(w.raw(), f.weights.raw(), w.nbytes()));
  const ModelConfig back = read_hf_model_folder(f.dir.str()).config;
  EXPECT_FALSE(back.has_moe());
  EXPECT_EQ(ParamTable(back).total(), f.table.total());
  const NamedTensors t = hf_named_tensors(f.table, f.weights, "model.", DType::F32);
  for (const auto& [name, tensor] : t) EXPECT_EQ(name.find("router"), std::string::npos) << name;
}

// The small block (gemma4-e2b/e4b): per-layer-input tensors, no k/v weights in the sharing
// layers, a double-wide MLP there; config.json and weights read back as written, bit for bit.
TEST(HfModel, SmallBlockRoundTripIsBitExact) {
  ModelConfig c = testing::small_test_config(4);  // layers 1, 3 global; 2, 3 read 0, 1
  c.num_experts = 1;
  c.share_kv_projections = false;
  c.global_num_kv_heads = c.num_kv_heads;  // as transformers has it without K = V
  c.per_layer_input_dim = 4;
  c.per_layer_vocab = c.vocab_size;
  c.num_kv_shared_layers = 2;
  c.double_wide_mlp = true;
  Folder f(c);
  f.write();
  const Tensor w = f.load();
  EXPECT_EQ(0, std::memcmp(w.raw(), f.weights.raw(), w.nbytes()));
  const ModelConfig back = read_hf_model_folder(f.dir.str()).config;
  EXPECT_EQ(back.shape_difference(c), "");
  EXPECT_EQ(ParamTable(back).total(), f.table.total());
  std::set<std::string> names;
  for (const auto& [name, tensor] : hf_named_tensors(f.table, f.weights, "model.", DType::F32))
    names.insert(name);
  for (const char* n : {"model.embed_tokens_per_layer.weight",
                        "model.per_layer_model_projection.weight",
                        "model.per_layer_projection_norm.weight",
                        "model.layers.3.per_layer_input_gate.weight",
                        "model.layers.3.per_layer_projection.weight",
                        "model.layers.3.post_per_layer_input_norm.weight",
                        "model.layers.1.self_attn.k_proj.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  for (const char* n : {"model.layers.2.self_attn.k_proj.weight",
                        "model.layers.3.self_attn.v_proj.weight",
                        "model.layers.2.self_attn.k_norm.weight"})
    EXPECT_FALSE(names.count(n)) << n;
  EXPECT_EQ(f.table.at("layers.3.mlp.down_proj.weight").shape[1], 2 * c.mlp_dim);
  EXPECT_EQ(f.table.at("layers.1.mlp.down_proj.weight").shape[1], c.mlp_dim);
}

TEST(HfModel, Bfloat16ShardsAreConvertedOnLoad) {
  Folder f;
  f.write({}, "model.", DType::BF16);
  const Tensor w = f.load();
  for (int64_t i = 0; i < w.numel(); i += 97)
    EXPECT_EQ(get_as_double(w, i), double(float(bf16(float(get_as_double(f.weights, i))))));
}

TEST(HfModel, MultimodalPrefixAndVisionTowerSkippedWithOneLine) {
  Folder f;
  NamedTensors t = hf_named_tensors(f.table, f.weights, "model.language_model.", DType::F32);
  t.emplace_back("model.vision_tower.patch.weight", Tensor::zeros({4, 4}, DType::F32));
  t.emplace_back("model.embed_vision.proj.weight", Tensor::zeros({2}, DType::F32));
  write_hf_checkpoint(f.dir.str(), t, 1 << 30);
  // The released multimodal form nests the decoder's keys under text_config.
  nlohmann::json text = nlohmann::json::parse(hf_config_json(f.cfg, DType::F32));
  nlohmann::json top = {{"model_type", "gemma4"},
                        {"architectures", {"Gemma4ForConditionalGeneration"}},
                        {"text_config", text}};
  testing::write_file(f.dir / "config.json", top.dump());
  std::string note;
  const Tensor w = f.load(&note);
  EXPECT_EQ(0, std::memcmp(w.raw(), f.weights.raw(), w.nbytes()));
  EXPECT_NE(note.find("skipped 2 tensors outside the text decoder"), std::string::npos) << note;
}

TEST(HfModel, MissingTensorIsNamed) {
  Folder f;
  f.write([](NamedTensors& t) {
    std::erase_if(t, [](auto& p) { return p.first == "model.layers.1.router.scale"; });
  });
  expect_error([&] { f.load(); }, {"missing tensor 'model.layers.1.router.scale'", "[16]"});
}

TEST(HfModel, ExtraTensorIsNamed) {
  Folder f;
  f.write([](NamedTensors& t) {
    t.emplace_back("model.layers.1.self_attn.v_proj.weight", Tensor::zeros({12, 16}, DType::F32));
  });
  expect_error([&] { f.load(); }, {"'model.layers.1.self_attn.v_proj.weight'", "does not have"});
}

TEST(HfModel, WrongShapeNamesExpectedAndActual) {
  Folder f;
  f.write([](NamedTensors& t) {
    for (auto& [name, tensor] : t)
      if (name == "model.layers.0.experts.down_proj") tensor = Tensor::zeros({5, 16, 7}, DType::F32);
  });
  expect_error([&] { f.load(); },
               {"'model.layers.0.experts.down_proj'", "[5, 16, 7]", "[5, 16, 6]"});
}

TEST(HfModel, WrongDtypeIsNamed) {
  Folder f;
  f.write([](NamedTensors& t) {
    for (auto& [name, tensor] : t)
      if (name == "model.norm.weight") tensor = Tensor::zeros(tensor.shape(), DType::I32);
  });
  expect_error([&] { f.load(); }, {"model.norm.weight", "int32"});
}

TEST(HfModel, ConfigThatDoesNotMatchTheTensors) {
  Folder f;
  f.write();
  ModelConfig fewer = f.cfg;  // config.json says fewer experts than the tensors hold
  fewer.num_experts = 4;
  write_hf_config(fewer, DType::F32, f.dir / "config.json");
  expect_error([&] { f.load(); }, {"'model.layers.0.router.proj.weight'", "[5, 16]", "[4, 16]"});
}

TEST(HfModel, MissingFolderOrConfig) {
  expect_error([] { read_hf_model_folder("/nonexistent/gemma"); }, {"does not exist"});
  TempDir d;
  expect_error([&] { read_hf_model_folder(d.str()); }, {"has no config.json"});
}

}  // namespace
}  // namespace gemmax
