// Supervised fine-tuning's loss masks: token shards of version 2 carry them (version 1 still
// reads), packing keeps them per document, the loss and its gradient count only the masked-in
// targets (against a hand-masked fp64 loss), `gemmax tokenize` writes prompt-completion pairs,
// and 2 FSDP ranks train what one rank trains with masks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/data/loader.h"
#include "gemmax/data/packing.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/data/tokenize_files.h"
#include "gemmax/model/gemma4.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::TempDir;
using V = std::vector<int32_t>;
using M = std::vector<uint8_t>;

TEST(LossMask, ShardVersion2CarriesTheMaskAndVersion1StillReads) {
  TempDir dir;
  const std::string v1 = dir / "v1.bin", v2 = dir / "v2.bin";
  {
    ShardWriter w(v1, 259, 1, 2, 0);
    w.add_document(V{10, 11}, true);
    w.finish();
  }
  {
    ShardWriter w(v2, 259, 1, 2, 0);
    w.add_document(V{10, 11}, true);                // plain text: counts whole
    w.add_document(V{20, 21, 22}, true, M{0, 0, 1});  // prompt 20 21, completion 22
    w.finish();
  }
  const TokenShard a(v1), b(v2);
  EXPECT_EQ(a.header().version, 1u);
  EXPECT_TRUE(a.loss_mask().empty());
  EXPECT_EQ(b.header().version, 2u);
  EXPECT_EQ(std::filesystem::file_size(v2), 64u + 5u * 9u);
  const std::vector<uint32_t> tokens(b.tokens().begin(), b.tokens().end());
  EXPECT_EQ(tokens, (std::vector<uint32_t>{2, 10, 11, 1, 2, 20, 21, 22, 1}));
  const M mask(b.loss_mask().begin(), b.loss_mask().end());
  EXPECT_EQ(mask, (M{1, 1, 1, 1, 0, 0, 0, 1, 1})) << "bos of a pair and its prompt: 0";
  b.validate_tokens(259);

  // A cut-off mask, and a mask byte that is not 0/1.
  std::string bytes = testing::read_file(v2);
  testing::write_file(dir / "cut.bin", bytes.substr(0, bytes.size() - 1));
  expect_error([&] { TokenShard s(dir / "cut.bin"); },
               {"cut.bin", "truncated", "version 2"});
  bytes[bytes.size() - 2] = 7;
  testing::write_file(dir / "bad.bin", bytes);
  expect_error([&] { TokenShard(dir / "bad.bin").validate_tokens(259); },
               {"bad.bin", "loss mask of token 7", "0 or 1"});
}

// Documents A = bos 10 11 eos (mask 0 0 1 1), B = bos 20 eos (0 1 1) and C = 11 tokens (mask i % 2)
// in rows of 8: A and B share row 0, C is cut into pieces of 8 and 3, each keeping its mask.
TEST(LossMask, PackingKeepsMasksAndSegmentsPerDocument) {
  std::vector<uint32_t> tokens = {2, 10, 11, 1, 2, 20, 1};
  M mask = {0, 0, 1, 1, 0, 1, 1};
  for (uint32_t i = 0; i < 10; ++i) tokens.push_back(30 + i), mask.push_back(i % 2);
  tokens.push_back(1);
  mask.push_back(0);
  Documents docs;
  docs.add(tokens, 1, nullptr, mask);
  ASSERT_EQ(docs.size(), 3u);
  for (bool masked : {true, false}) {
    Batch b;
    b.batch = 3;
    b.seq = 8;
    for (auto* v : {&b.inputs, &b.positions, &b.segment_ids}) v->resize(24);
    if (masked) b.loss_mask.resize(24);
    PackCursor cur;
    for (int64_t r = 0; r < 3; ++r) pack_row(docs, true, 0, cur, b, r);
    make_targets(b, 0, 0);
    const V row0(b.target_segment_ids.begin(), b.target_segment_ids.begin() + 8);
    EXPECT_EQ(row0, masked ? (V{0, 1, 1, 0, 2, 2, 0, 0}) : (V{1, 1, 1, 2, 2, 2, 0, 0}));
    if (!masked) continue;
    const M row1(b.loss_mask.begin() + 8, b.loss_mask.begin() + 16);
    EXPECT_EQ(row1, (M{0, 1, 0, 1, 0, 1, 0, 1})) << "C's first piece";
    const M row2(b.loss_mask.begin() + 16, b.loss_mask.begin() + 19);
    EXPECT_EQ(row2, (M{0, 1, 0})) << "C's last piece keeps its offset into the mask";
    for (int64_t i = 0; i < 24; ++i)  // a target counts only where its token is masked in
      if (i % 8 != 7 && b.target_segment_ids[size_t(i)] != 0)
        EXPECT_EQ(b.loss_mask[size_t(i + 1)], 1) << i;
  }
}

// The model's loss with targets masked out, and its gradient, against the loss computed by hand
// from the logits over the masked-in targets only (fp64, reference backend): the values agree to
// rounding, and the gradient to central differences of the hand loss along random directions.
TEST(LossMask, GradientsEqualAHandMaskedReferenceLoss) {
  ModelConfig cfg = testing::small_test_config(2);
  cfg.load_balance_loss_weight = 0;  // total_loss = the cross-entropy alone
  auto be = make_backend("reference");
  ModelOptions mo;
  mo.act = DType::F64;
  Gemma4Model model(cfg, *be, mo);
  const Tensor w = testing::random_weights(model.params(), 11);
  Batch batch = testing::make_batch(2, 10, cfg.vocab_size, 5, 6);
  // Prompts: the first three targets of each document do not count.
  for (int64_t i = 0; i < 20; ++i)
    if (i % 10 < 3 || (i % 10 >= 6 && i % 10 < 8)) batch.target_segment_ids[size_t(i)] = 0;
  const int64_t counted = batch.num_target_tokens();
  ASSERT_EQ(counted, 2 * 5);
  const StepInputs in = upload_batch(*be, batch);

  auto hand_loss = [&](const Tensor& weights) {
    Tensor logits;
    model.forward(in, weights, &logits);
    const Tensor h = be->to_host(logits);
    const int64_t Vv = cfg.vocab_size;
    double sum = 0;
    for (int64_t t = 0; t < 20; ++t) {
      if (batch.target_segment_ids[size_t(t)] == 0) continue;
      double mx = -INFINITY, z = 0;
      for (int64_t v = 0; v < Vv; ++v) mx = std::max(mx, get_as_double(h, t * Vv + v));
      for (int64_t v = 0; v < Vv; ++v) z += std::exp(get_as_double(h, t * Vv + v) - mx);
      sum += mx + std::log(z) - get_as_double(h, t * Vv + batch.targets[size_t(t)]);
    }
    return Gemma4Model::ce_mean(sum, counted);  // the mean's formula, MaxText's (+1e-8)
  };
  Tensor grads = be->zeros({w.numel()}, DType::F64, MemKind::Grads);
  const Tensor wd = be->to_device(w, MemKind::Params);
  const LossInfo info = model.forward_backward(in, wd, grads);
  EXPECT_EQ(info.num_targets, counted);
  EXPECT_NEAR(info.ce_loss, hand_loss(wd), 1e-12);
  const Tensor g = be->to_host(grads);

  // Central differences of the hand loss in sampled weights of every parameter (routing is
  // piecewise: h is far below the smallest gap between routing scores here).
  Tensor x = Tensor::empty({w.numel()}, DType::F64);
  std::memcpy(x.raw(), w.raw(), w.nbytes());
  for (const ParamSpec& s : model.params().specs()) {
    const Tensor xs = x.flat_slice(s.offset, {s.numel()});
    const Tensor gs = g.flat_slice(s.offset, {s.numel()});
    testing::expect_grad_matches_fd(s.name, xs, gs,
                                    [&] { return hand_loss(be->to_device(x, MemKind::Params)); },
                                    3, 1e-6, 1e-6);
  }

  // The mask matters: counting every target gives another gradient.
  Batch all = batch;
  for (int64_t i = 0; i < 20; ++i)
    all.target_segment_ids[size_t(i)] = batch.segment_ids[size_t(i)];
  Tensor grads_all = be->zeros({w.numel()}, DType::F64, MemKind::Grads);
  model.forward_backward(upload_batch(*be, all), wd, grads_all);
  EXPECT_GT(testing::max_abs_diff(be->to_host(grads_all), g), 1e-6);
}

TEST(LossMask, TokenizeWritesPromptCompletionPairs) {
  TempDir dir;
  const std::string in = dir / "sft.jsonl", out = dir / "sft.bin";
  testing::write_file(in, "{\"prompt\": \"Q: 2+2?\\n\", \"completion\": \"A: 4\"}\n"
                          "{\"text\": \"plain\"}\n");
  TokenizeOptions o;
  o.inputs = {in};
  o.out = out;
  const TokenizeResult r = tokenize_files(o);
  EXPECT_EQ(r.pairs, 1u);
  EXPECT_EQ(r.documents, 2u);
  const TokenShard s(out);
  ASSERT_EQ(s.header().version, 2u);
  const M mask(s.loss_mask().begin(), s.loss_mask().end());
  // bos, 8 prompt bytes (0), 4 completion bytes and eos (1); then "plain" whole.
  M want(9, 0);
  want.resize(14, 1);
  want.resize(14 + 7, 1);
  EXPECT_EQ(mask, want);

  // Bad lines: named by file and line, and no shard (nor temporary file) is left behind.
  auto bad = [&](const std::string& text, std::vector<std::string> parts) {
    testing::write_file(in, "{\"text\": \"fine\"}\n" + text + "\n");
    std::filesystem::remove(out);
    parts.insert(parts.begin(), in + ":2");
    expect_error([&] { tokenize_files(o); }, parts);
    for (const auto& e : std::filesystem::directory_iterator(dir.path))
      EXPECT_EQ(e.path().extension(), ".jsonl") << e.path() << " left behind";
  };
  bad("not json", {"not valid JSON"});
  bad("{\"prompt\": \"Q\", \"completion\": \"\"}", {"completion is empty after tokenization"});
  bad("{\"prompt\": \"Q\"}", {"\"completion\" is missing"});
  bad("{\"prompt\": 3, \"completion\": \"x\"}", {"\"prompt\" is number"});
  bad("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", {"chat template"});
}

// sft_train_on_completion_only needs masks; without it a version-2 shard counts every token.
TEST(LossMask, CompletionOnlyCountsTheMaskedTokensAndNeedsMasks) {
  TempDir dir;
  const std::string v1 = dir / "v1.bin", v2 = dir / "v2.bin";
  ShardWriter w1(v1, 259, 1, 2, 0), w2(v2, 259, 1, 2, 0);
  Rng rng(1);
  for (int d = 0; d < 20; ++d) {
    V ids;
    M mask;
    for (int i = 0; i < 12; ++i) ids.push_back(3 + int32_t(rng.uniform_int(250))), mask.push_back(i >= 8);
    w1.add_document(ids, true);
    w2.add_document(ids, true, mask);
  }
  w1.finish();
  w2.finish();
  DataOptions o;
  o.dataset_type = "shards";
  o.batch = 2;
  o.seq = 28;
  o.vocab_size = 259;
  o.packing = false;  // one document per row: 14 tokens, 13 targets of which 5 masked in
  o.dataset_path = v2;
  EXPECT_EQ(make_data_loader(o)->next().num_target_tokens(), 2 * 13);
  o.completion_only = true;
  EXPECT_EQ(make_data_loader(o)->next().num_target_tokens(), 2 * 5);
  o.dataset_path = v1;
  expect_error([&] { make_data_loader(o); },
               {"sft_train_on_completion_only=true", "v1.bin", "no loss mask", "gemmax tokenize"});
  o.dataset_type = "builtin";
  o.dataset_path = "";
  expect_error([&] { make_data_loader(o); }, {"sft_train_on_completion_only=true", "shards"});
}

#define REQUIRE_MPI() \
  if (std::string(GEMMAX_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI"

// Two FSDP ranks with one row each train what one rank trains with both rows, the loss
// normalised by the counted (completion) targets of the global batch, and evaluate alike (fp64,
// where the runs agree to rounding; in fp32 Adam spreads rounding-sized differences).
TEST(LossMask, TwoFsdpRanksTrainWhatOneRankTrainsWithMasks) {
  REQUIRE_MPI();
  TempDir dir;
  const std::string shard = dir / "sft.bin";
  {
    ShardWriter w(shard, 259, 1, 2, 0);
    Rng rng(2);
    for (int d = 0; d < 40; ++d) {
      V ids;
      M mask;
      const int n = 6 + int(rng.uniform_int(20)), prompt = 2 + int(rng.uniform_int(4 + d % 7));
      for (int i = 0; i < n; ++i) ids.push_back(3 + int32_t(rng.uniform_int(250))), mask.push_back(i >= prompt);
      w.add_document(ids, true, mask);
    }
    w.finish();
  }
  auto run = [&](int ranks, int rows, const std::string& out) {
    std::string cmd = ranks > 0 ? testing::mpiexec() + " -np " +
                                      std::to_string(ranks) + " " + GEMMAX_BINARY + " train"
                                : std::string(GEMMAX_BINARY) + " train";
    const std::vector<std::string> args = {
        "base_output_directory=" + out, "run_name=r", "backend=reference", "base_emb_dim=32",
        "max_target_length=32", "dtype=float64", "weight_dtype=float64", "steps=4",
        "log_period=1000",
        "sample_max_new_tokens=0", "comm_timeout_seconds=120", "dataset_type=shards",
        "dataset_path=" + shard, "eval_dataset_path=" + shard, "eval_interval=2", "eval_steps=2",
        "sft_train_on_completion_only=true", "per_device_batch_size=" + std::to_string(rows)};
    for (const std::string& a : args)
      cmd += " " + a;
    std::string log;
    EXPECT_EQ(testing::run_command(cmd, &log), 0) << log;
    std::ifstream in(out + "/r/metrics.jsonl");
    std::vector<nlohmann::json> m;
    for (std::string line; std::getline(in, line);) m.push_back(nlohmann::json::parse(line));
    return m;
  };
  TempDir one, two;
  const auto a = run(0, 2, one.str()), b = run(2, 1, two.str());
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i]["learning/total_weights"], b[i]["learning/total_weights"]) << i;
    EXPECT_LT(a[i]["learning/total_weights"].get<int64_t>(), 2 * 31) << "prompts not counted";
    const double la = a[i]["learning/loss"].get<double>(), lb = b[i]["learning/loss"].get<double>();
    EXPECT_NEAR(la, lb, 1e-10 * la) << "step " << i;
  }
  for (size_t i : {1u, 3u}) {
    EXPECT_EQ(a[i]["eval/total_weights"], b[i]["eval/total_weights"]) << i;
    const double ea = a[i]["eval/avg_loss"].get<double>(), eb = b[i]["eval/avg_loss"].get<double>();
    EXPECT_NEAR(ea, eb, 1e-10 * ea) << "eval after step " << i;
  }
}

}  // namespace
}  // namespace gemmax
