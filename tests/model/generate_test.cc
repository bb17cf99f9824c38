// generate() (model/generate.h): greedy generation against the argmax of the full forward at
// every step, seeds, the stop at eos, and bad input.
#include "gemmax/model/generate.h"

#include <gtest/gtest.h>

#include <memory>

#include "gemmax/backend/reference/reference_backend.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::argmax;
using testing::byte_config;
using testing::expect_error;
using testing::random_weights;

// The byte tokenizer with another eos id (to make generation stop where the test wants).
class EosTokenizer final : public Tokenizer {
 public:
  explicit EosTokenizer(int32_t eos) : eos_(eos) {}
  std::vector<int32_t> encode(std::string_view t) const override { return byte_->encode(t); }
  std::string decode(std::span<const int32_t> ids) const override { return byte_->decode(ids); }
  int64_t vocab_size() const override { return byte_->vocab_size(); }
  int32_t bos_id() const override { return byte_->bos_id(); }
  int32_t eos_id() const override { return eos_; }
  int32_t pad_id() const override { return byte_->pad_id(); }
  std::string describe() const override { return "byte with eos " + std::to_string(eos_); }

 private:
  std::unique_ptr<Tokenizer> byte_ = make_byte_tokenizer();
  int32_t eos_;
};

TEST(Generate, GreedyEqualsArgmaxOfTheFullForwardEachStep) {
  ReferenceBackend be;
  const ModelConfig cfg = byte_config();
  Gemma4Model model(cfg, be, {DType::F64, RematPolicy::None, 1});
  const Tensor w = random_weights(model.params(), 11, DType::F64);
  const auto tok = make_byte_tokenizer();
  const SampleOptions greedy{.max_new_tokens = 10, .temperature = 0};
  const Generation g = generate(model, w, *tok, "Hi there", greedy);
  ASSERT_EQ(g.prompt_ids.size(), 9u);  // bos + 8 bytes
  EXPECT_EQ(g.prompt_ids[0], tok->bos_id());
  EXPECT_EQ(g.prompt_text, "Hi there");

  // The same tokens by re-running the whole sequence through forward for every new token.
  std::vector<int32_t> seq = g.prompt_ids, expected;
  for (size_t n = 0; n < g.new_ids.size(); ++n) {
    Batch b;
    b.batch = 1;
    b.seq = int64_t(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      b.inputs.push_back(seq[i]);
      b.targets.push_back(0);
      b.positions.push_back(int32_t(i));
      b.segment_ids.push_back(1);
      b.target_segment_ids.push_back(1);
    }
    Tensor logits;
    model.forward(upload_batch(be, b), w, &logits);
    const Tensor last = logits.rows(b.seq - 1, b.seq);
    std::vector<double> l(cfg.vocab_size);
    for (int64_t v = 0; v < cfg.vocab_size; ++v) l[v] = get_as_double(last, v);
    expected.push_back(argmax(l));
    seq.push_back(expected.back());
    if (expected.back() == tok->eos_id()) break;
  }
  EXPECT_EQ(g.new_ids, expected);
  EXPECT_EQ(g.completion, tok->decode(g.new_ids));
  EXPECT_EQ(generate_text(model, w, *tok, "Hi there", greedy), "Hi there" + g.completion);
}

TEST(Generate, SameSeedSameTextAndStopsAtEos) {
  ReferenceBackend be;
  Gemma4Model model(byte_config(), be, {DType::F32, RematPolicy::None, 1});
  const Tensor w = random_weights(model.params(), 2, DType::F32);
  const auto tok = make_byte_tokenizer();
  const SampleOptions o{.max_new_tokens = 24, .temperature = 1.0, .top_k = 40, .seed = 8};
  const Generation a = generate(model, w, *tok, "Once upon", o);
  const Generation b = generate(model, w, *tok, "Once upon", o);
  EXPECT_EQ(a.new_ids, b.new_ids);
  EXPECT_EQ(a.completion, b.completion);
  SampleOptions o2 = o;
  o2.seed = 9;
  EXPECT_NE(generate(model, w, *tok, "Once upon", o2).new_ids, a.new_ids);
  EXPECT_GT(a.prefill_tokens_per_sec(), 0.0);
  EXPECT_NE(generation_stats(a).find("tokens/s"), std::string::npos);

  // Make the third sampled token the eos: generation stops right there, eos included.
  ASSERT_GE(a.new_ids.size(), 3u);
  if (a.new_ids[0] != a.new_ids[2] && a.new_ids[1] != a.new_ids[2]) {
    const EosTokenizer eos(a.new_ids[2]);
    const Generation c = generate(model, w, eos, "Once upon", o);
    EXPECT_TRUE(c.stopped_at_eos);
    EXPECT_EQ(c.new_ids, std::vector<int32_t>(a.new_ids.begin(), a.new_ids.begin() + 3));
    EXPECT_EQ(c.decode_steps, 2);
  }
}

TEST(Generate, BadInputIsNamed) {
  ReferenceBackend be;
  Gemma4Model small_vocab(testing::small_test_config(2), be, {DType::F32, RematPolicy::None, 1});
  const Tensor w = random_weights(small_vocab.params(), 2, DType::F32);
  const auto tok = make_byte_tokenizer();
  expect_error([&] { generate(small_vocab, w, *tok, "x", {}); },
               {"byte (vocab 259)", "larger vocabulary than the model (37 tokens)"});
  Gemma4Model model(byte_config(), be, {DType::F32, RematPolicy::None, 1});
  const Tensor w2 = random_weights(model.params(), 2, DType::F32);
  expect_error([&] { generate(model, w2, *tok, "", {}); }, {"prompt is empty"});
  expect_error([&] { generate(model, w2, *tok, "x", {.top_p = 2}); }, {"top_p"});
}

}  // namespace
}  // namespace gemmax
