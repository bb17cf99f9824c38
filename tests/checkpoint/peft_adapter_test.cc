// PEFT's adapter folder (checkpoint/peft_adapter.h) against files PEFT itself wrote
// (tests/reference/peft/fixtures, made by make_peft_fixtures.py): the adapted model's logits, the
// merged weights and the adapters' gradients equal PEFT's, and a folder gemmax writes reads back
// as the same adapter, under PEFT's names and config. Bad folders are refused, naming the file.
#include "gemmax/checkpoint/peft_adapter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/io/safetensors.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/head.h"
#include "gemmax/model/lora/lora_params.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::relative_l2;
using testing::TempDir;

// An adapter folder's target_modules, which must be written as a regex (a string, not a list).
std::regex target_modules_regex(const std::string& dir) {
  std::ifstream in(dir + "/adapter_config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  EXPECT_TRUE(c["target_modules"].is_string()) << c["target_modules"];
  return std::regex(c["target_modules"].is_string() ? c["target_modules"].get<std::string>()
                                                    : std::string("$^"));  // matches nothing
}

const std::string kFixtures = std::string(GEMMAX_SOURCE_DIR) + "/tests/reference/peft/fixtures";

// The fixtures' batch: tokens.bin's rows, inputs [:, :-1], targets [:, 1:], one document a row.
Batch fixture_batch(const std::string& preset) {
  const SafetensorsFile f = SafetensorsFile::open(kFixtures + "/" + preset + "/logits.safetensors");
  const Tensor ids = f.read_as("input_ids", DType::I32);
  std::ifstream in(kFixtures + "/" + preset + "/model/tokens.bin", std::ios::binary);
  std::vector<int32_t> tok((std::istreambuf_iterator<char>(in)), {});
  tok.resize(tok.size() / 4);
  in.clear();
  in.seekg(0);
  in.read(reinterpret_cast<char*>(tok.data()), std::streamsize(tok.size() * 4));
  Batch b;
  b.batch = ids.dim(0);
  b.seq = ids.dim(1);
  for (int64_t r = 0; r < b.batch; ++r)
    for (int64_t s = 0; s < b.seq; ++s) {
      b.inputs.push_back(tok[size_t(r * (b.seq + 1) + s)]);
      b.targets.push_back(tok[size_t(r * (b.seq + 1) + s + 1)]);
      b.positions.push_back(int32_t(s));
      b.segment_ids.push_back(1);
      b.target_segment_ids.push_back(1);
      EXPECT_EQ(b.inputs.back(), ids.data<int32_t>()[r * b.seq + s]);
    }
  return b;
}

// The adapted model on the reference backend in fp64: its logits [T, V], or with `grads` the
// adapters' gradients of the mean cross-entropy (no load-balance term: transformers has none).
struct Adapted {
  explicit Adapted(const std::string& preset, const std::string& adapter = "lora")
      : m(load_model_dir(kFixtures + "/" + preset + "/model", DType::F64)),
        table(m.config),
        batch(fixture_batch(preset)) {
    attach_peft_adapter(m, kFixtures + "/" + preset + "/" + adapter);
    m.config.load_balance_loss_weight = 0;
    adapters = std::make_unique<AdapterTable>(table, m.lora->targets, m.lora->shape);
  }
  Tensor logits() {
    Gemma4Model model(m.config, be, {DType::F64, RematPolicy::None, 1});
    const StepInputs in = upload_batch(be, batch);
    const Tensor scalars = be.zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
    WholeParams frozen(be, table, model.options(), m.weights, Tensor());
    LoraParams p(be, frozen, *adapters, model.options(), m.lora->weights, Tensor());
    const Tensor x = model.forward_only(in, p, scalars);
    const ModelWeights w = bind_model(table, m.weights);
    return head_logits(be, m.config, model.options(), {w.embed, w.final_norm}, x);
  }
  Tensor grads(double* ce) {
    Gemma4Model model(m.config, be, {DType::F64, RematPolicy::None, 1});
    const StepInputs in = upload_batch(be, batch);
    const Tensor scalars = be.zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
    Tensor g = Tensor::zeros({adapters->params().total()}, DType::F64);
    WholeParams frozen(be, table, model.options(), m.weights, Tensor());
    LoraParams p(be, frozen, *adapters, model.options(), m.lora->weights, g);
    model.forward_backward(in, p, scalars);
    *ce = model.losses(scalars, in).ce_loss;
    return g;
  }
  LoadedModel m;
  ParamTable table;
  Batch batch;
  ReferenceBackend be;
  std::unique_ptr<AdapterTable> adapters;
};

Tensor fixture(const std::string& file, const std::string& name) {
  return SafetensorsFile::open(kFixtures + "/" + file).read_as(name, DType::F64);
}

TEST(PeftFixtures, AdaptedLogitsEqualPefts) {
  for (const auto& [preset, adapter, logits] : {std::tuple{"base", "lora", "logits"},
                                                {"dense", "lora", "logits"},
                                                {"dense", "lora_rslora", "logits_rslora"},
                                                {"small_e2b", "lora", "logits"}}) {
    Adapted a(preset, adapter);
    const Tensor want = fixture(std::string(preset) + "/" + logits + ".safetensors", "logits_peft");
    const Tensor base = fixture(std::string(preset) + "/" + logits + ".safetensors", "logits_base");
    const Tensor got = a.logits();
    // PEFT ran in fp32: ~1e-6 of the logits' scale; the adapter moved them by ~10%.
    EXPECT_LT(relative_l2(want, got), 2e-6) << preset << " " << adapter;
    EXPECT_GT(relative_l2(base, got), 0.05) << preset << " " << adapter;
  }
}

TEST(PeftFixtures, MergedWeightsEqualPefts) {
  LoadedModel m = load_model_dir(kFixtures + "/small_e2b/model", DType::F32);
  attach_peft_adapter(m, kFixtures + "/small_e2b/lora");
  const Tensor merged = merged_weights(m);
  const LoadedModel want = load_model_dir(kFixtures + "/small_e2b/merged", DType::F32);
  const ParamTable table(m.config);
  int changed = 0;
  for (const ParamSpec& s : table.specs()) {
    const Tensor w = table.view(want.weights, s.name), g = table.view(merged, s.name);
    const Tensor before = table.view(m.weights, s.name);
    EXPECT_LT(relative_l2(w, g), 1e-6) << s.name;
    changed += relative_l2(before, g) > 1e-4;
  }
  EXPECT_EQ(changed, int(m.lora->targets.size())) << "every adapted matrix moved, no other";
}

TEST(PeftFixtures, AdapterGradientsEqualPefts) {
  Adapted a("base");
  double ce = 0;
  const Tensor g = a.grads(&ce);
  EXPECT_NEAR(ce, 6.567880630493164, 1e-6);  // summary.json's loss_float64
  const NamedTensors mine = peft_named_tensors(*a.adapters, g, a.m.hf_prefix, DType::F64);
  const SafetensorsFile want = SafetensorsFile::open(kFixtures + "/base/lora_grads.safetensors");
  ASSERT_EQ(mine.size(), want.entries().size());
  for (const auto& [name, t] : mine) {
    ASSERT_TRUE(want.has(name)) << name;
    EXPECT_LT(relative_l2(want.read_as(name, DType::F64), t), 1e-5) << name;
  }
}

// Written by gemmax, read by gemmax: the same values (bit for bit in fp32), under the names and
// with the config fields of the adapter PEFT wrote for the same targets.
TEST(PeftAdapter, WhatGemmaxWritesIsWhatPeftWrites) {
  const LoadedModel m = load_model_dir(kFixtures + "/base/model", DType::F32);
  const ParamTable table(m.config);
  const PeftAdapter peft = read_peft_adapter(kFixtures + "/base/lora", table, DType::F32);
  const AdapterTable adapters(table, peft.targets, peft.shape);
  TempDir dir;
  write_peft_adapter(dir / "a", adapters, peft.weights, "base/model", m.hf_prefix);
  const PeftAdapter back = read_peft_adapter(dir / "a", table, DType::F32);
  ASSERT_EQ(back.weights.nbytes(), peft.weights.nbytes());
  EXPECT_EQ(std::memcmp(back.weights.raw(), peft.weights.raw(), peft.weights.nbytes()), 0);
  // The same tensors, names and bytes, as PEFT's own file.
  const SafetensorsFile a =
      SafetensorsFile::open(kFixtures + "/base/lora/adapter_model.safetensors");
  const SafetensorsFile b = SafetensorsFile::open(dir / "a/adapter_model.safetensors");
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (const SafetensorsEntry& e : a.entries()) {
    ASSERT_TRUE(b.has(e.name)) << e.name;
    const Tensor x = a.tensor(e.name), y = b.tensor(e.name);
    ASSERT_EQ(x.shape(), y.shape()) << e.name;
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << e.name;
  }
  EXPECT_EQ(b.metadata().at("format"), "pt");
  // The config: every field PEFT writes, with PEFT's values where they are not the adapter's own.
  std::ifstream in1(kFixtures + "/base/lora/adapter_config.json"),
      in2(dir / "a/adapter_config.json");
  nlohmann::json want = nlohmann::json::parse(in1), got = nlohmann::json::parse(in2);
  for (auto& [k, v] : want.items()) {
    ASSERT_TRUE(got.contains(k)) << k;
    if (k == "target_modules") {  // a set; the router's `proj` is written with its parent
      std::set<std::string> w(v.begin(), v.end()), g(got[k].begin(), got[k].end());
      if (g.erase("router.proj")) g.insert("proj");
      EXPECT_EQ(w, g);
    } else {
      EXPECT_EQ(got[k], v) << k;
    }
  }
  EXPECT_EQ(got.size(), want.size());
}

// Adapters on some layers only: target_modules becomes a regex naming exactly those.
TEST(PeftAdapter, ASelectionOfLayersIsWrittenAsARegexOfItsModules) {
  const ParamTable table(load_model_dir(kFixtures + "/dense/model", DType::F32).config);
  const AdapterTable adapters(table,
                              LoraTargeting{"decoder/layers_[01]/self_attention/query", {}, {}},
                              LoraShape{2, 4.0, false, 0.0});
  ASSERT_EQ(adapters.targets().size(), 2u);
  TempDir dir;
  write_peft_adapter(dir / "a", adapters, Tensor::zeros({adapters.params().total()}, DType::F32),
                     "b", "model.");
  const std::regex re = target_modules_regex(dir / "a");
  EXPECT_TRUE(std::regex_match("model.layers.1.self_attn.q_proj", re));
  EXPECT_FALSE(std::regex_match("model.layers.2.self_attn.q_proj", re));
  EXPECT_FALSE(std::regex_match("model.layers.1.self_attn.k_proj", re));
  EXPECT_EQ(read_peft_adapter(dir / "a", table, DType::F32).targets.size(), 2u);
  // Every layer of a multimodal folder's language model: the regex form too, so that the vision
  // and audio towers' own q_proj (which PEFT cannot adapt) are not named.
  const AdapterTable all(table, LoraTargeting{"", {"q_proj"}, {}}, LoraShape{2, 4.0, false, 0.0});
  write_peft_adapter(dir / "mm", all, Tensor::zeros({all.params().total()}, DType::F32), "b",
                     "model.language_model.");
  const std::regex mre = target_modules_regex(dir / "mm");
  EXPECT_TRUE(std::regex_match("model.language_model.layers.0.self_attn.q_proj", mre));
  EXPECT_FALSE(std::regex_match("model.vision_tower.encoder.layers.0.self_attn.q_proj", mre));
  EXPECT_EQ(read_peft_adapter(dir / "mm", table, DType::F32).targets.size(), all.targets().size());
}

// A lone expert wrapper (one of the experts' weights adapted) is read whichever way its config
// names the weight: PEFT's short form, full keys with the model's prefix, or not at all (then
// the weight whose input side fits lora_A, for lora_A and lora_B alike).
TEST(PeftAdapter, ALoneExpertWrapperIsReadHoweverItsWeightIsNamed) {
  const ParamTable table(load_model_dir(kFixtures + "/base/model", DType::F32).config);
  for (const char* param : {"experts.gate_up_proj", "experts.down_proj"}) {
    const AdapterTable adapters(table, LoraTargeting{"", {}, {param}}, LoraShape{2, 4.0, false, 0});
    ASSERT_FALSE(adapters.targets().empty()) << param;
    TempDir dir;
    write_peft_adapter(dir / "a", adapters, Tensor::zeros({adapters.params().total()}, DType::F32),
                       "b", "model.language_model.");
    std::ifstream in(dir / "a/adapter_config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    for (const nlohmann::json& names :
         {c["target_parameters"], nlohmann::json(nullptr), nlohmann::json::array()}) {
      nlohmann::json edited = c;
      edited["target_parameters"] = names;
      if (names.is_array() && names.empty())  // full keys, one per layer
        for (const LoraTarget& t : adapters.targets())
          edited["target_parameters"].push_back("model.language_model." + t.module + "." +
                                                t.parameter);
      testing::write_file(dir / "a/adapter_config.json", edited.dump());
      const PeftAdapter back = read_peft_adapter(dir / "a", table, DType::F32);
      ASSERT_EQ(back.targets.size(), adapters.targets().size()) << param << " " << names;
      for (size_t i = 0; i < back.targets.size(); ++i)
        EXPECT_EQ(back.targets[i].a_name, adapters.targets()[i].a_name) << param << " " << names;
    }
  }
}

TEST(PeftAdapter, BadFoldersAreRefusedNamingTheFileAndTheFix) {
  const ParamTable base(load_model_dir(kFixtures + "/base/model", DType::F32).config);
  auto read = [&](const std::string& dir) { read_peft_adapter(dir, base, DType::F32); };
  // Another model's adapter, of another rank.
  expect_error([&] { read(kFixtures + "/bad/lora_r8_small_e2b"); },
               {"adapter_model.safetensors", "shape", "another model or another rank"});
  expect_error([&] { read("/nonexistent/adapter"); }, {"does not exist"});
  TempDir dir;
  fs::create_directories(dir / "x");
  expect_error([&] { read(dir / "x"); }, {"adapter_config.json", "adapter_model.safetensors"});
  auto with_config = [&](nlohmann::json edit) {
    std::ifstream in(kFixtures + "/base/lora/adapter_config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c.update(edit);
    fs::remove_all(dir / "y");
    fs::create_directories(dir / "y");
    fs::copy_file(kFixtures + "/base/lora/adapter_model.safetensors",
                  dir / "y/adapter_model.safetensors");
    testing::write_file(dir / "y/adapter_config.json", c.dump());
    return dir / "y";
  };
  expect_error(
      [&] {
        read(with_config({{"use_dora", true}}));
      },
      {"use_dora", "adapter_config.json"});
  expect_error([&] { read(with_config({{"peft_type", "IA3"}})); }, {"peft_type", "LORA"});
  expect_error([&] { read(with_config({{"r", 8}})); }, {"shape", "r=8"});
  expect_error([&] { read(with_config({{"rank_pattern", {{"q_proj", 8}}}})); }, {"rank_pattern"});
  expect_error([&] { read(with_config({{"bias", "all"}})); }, {"bias"});
  // Activated LoRA applies after its invocation tokens only: not an ordinary adapter.
  expect_error(
      [&] {
        read(with_config({{"alora_invocation_tokens", {5, 6}}}));
      },
      {"alora_invocation_tokens"});
  expect_error(
      [&] {
        read(with_config({{"use_rslora", "yes"}}));
      },
      {"use_rslora", "true or false"});
  read(with_config({{"use_rslora", nullptr}}));  // null: PEFT's default, false
  testing::write_file(dir / "y/adapter_config.json", "{not json");
  expect_error([&] { read(dir / "y"); }, {"adapter_config.json", "not JSON"});
  // A tensor that adapts nothing of this model.
  std::ifstream in(kFixtures + "/base/lora/adapter_config.json");
  fs::remove_all(dir / "z");
  fs::create_directories(dir / "z");
  testing::write_file(dir / "z/adapter_config.json", nlohmann::json::parse(in).dump());
  write_safetensors(dir / "z/adapter_model.safetensors",
                    {{"base_model.model.model.layers.40.self_attn.q_proj.lora_A.weight",
                      Tensor::zeros({4, 32}, DType::F32)},
                     {"base_model.model.model.layers.40.self_attn.q_proj.lora_B.weight",
                      Tensor::zeros({32, 4}, DType::F32)}});
  expect_error([&] { read(dir / "z"); }, {"layers.40", "adapts no matrix", "another model"});
}

}  // namespace
}  // namespace gemmax
