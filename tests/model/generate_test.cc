// Generation: attention over a KV cache against attention_forward; prefill + step decoding
// against the full forward pass; the sliding layers' ring buffer; the sampler's distribution;
// generate() and the `gemmax sample` command.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/model/decode.h"
#include "gemmax/model/generate.h"
#include "gemmax/model/sampler.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::max_abs_diff;
using testing::random_tensor;
using testing::TempDir;

Tensor ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

using testing::random_weights;

// ---- the backend op ----------------------------------------------------------------------------

// Slots in a scrambled order with empty ones between them, as a ring buffer leaves them.
TEST(AttentionDecode, MatchesAttentionForwardWhateverTheSlotOrder) {
  ReferenceBackend be;
  const int64_t S = 11, H = 4, KV = 2, hd = 8, C = S + 3;
  for (DType dt : {DType::F64, DType::F32})
    for (int64_t window : {int64_t(0), int64_t(3)}) {
      Rng rng(17);
      const Tensor q = random_tensor({S, H, hd}, rng, 1.0, dt);
      const Tensor k = random_tensor({S, KV, hd}, rng, 1.0, dt);
      const Tensor v = random_tensor({S, KV, hd}, rng, 1.0, dt);
      Tensor o = Tensor::empty({S, H, hd}, dt), lse = Tensor::empty({1, H, S}, stat_dtype(dt));
      be.attention_forward({.o = o,
                            .lse = lse,
                            .q = q,
                            .k = k,
                            .v = v,
                            .segment_ids = ints(std::vector<int32_t>(S, 1)),
                            .shape = {1, S, H, KV, hd, window}});

      // Position p goes to slot (5 p + 2) mod C; the other slots stay empty (-1).
      Tensor kc = Tensor::zeros({C, KV, hd}, dt), vc = Tensor::zeros({C, KV, hd}, dt);
      std::vector<int32_t> slot_pos(C, -1), q_pos(S);
      for (int64_t p = 0; p < S; ++p) {
        const int64_t slot = (5 * p + 2) % C;
        slot_pos[slot] = int32_t(p);
        be.copy({.dst = kc.rows(slot, slot + 1), .src = k.rows(p, p + 1)});
        be.copy({.dst = vc.rows(slot, slot + 1), .src = v.rows(p, p + 1)});
        q_pos[p] = int32_t(p);
      }
      Tensor od = Tensor::empty({S, H, hd}, dt);
      be.attention_decode({.o = od,
                           .q = q,
                           .q_pos = ints(q_pos),
                           .k = kc,
                           .v = vc,
                           .kv_pos = ints(slot_pos),
                           .window = window});
      const double tol = dt == DType::F64 ? 1e-14 : 1e-6;
      EXPECT_LE(max_abs_diff(od, o), tol) << dtype_name(dt) << " window " << window;

      // The last query alone, as a decoding step asks it.
      Tensor o1 = Tensor::empty({1, H, hd}, dt);
      be.attention_decode({.o = o1,
                           .q = q.rows(S - 1, S),
                           .q_pos = ints({int32_t(S - 1)}),
                           .k = kc,
                           .v = vc,
                           .kv_pos = ints(slot_pos),
                           .window = window});
      EXPECT_LE(max_abs_diff(o1, o.rows(S - 1, S)), tol) << dtype_name(dt);
    }
}

TEST(AttentionDecode, AQueryWithNoVisibleSlotIsAnError) {
  ReferenceBackend be;
  Rng rng(1);
  const Tensor q = random_tensor({1, 2, 4}, rng), k = random_tensor({2, 1, 4}, rng);
  Tensor o = Tensor::empty({1, 2, 4}, DType::F64);
  // Slots hold positions 0 and 1; a query at position 5 with window 3 sees neither.
  expect_error(
      [&] {
        be.attention_decode({.o = o,
                             .q = q,
                             .q_pos = ints({5}),
                             .k = k,
                             .v = k,
                             .kv_pos = ints({0, 1}),
                             .window = 3});
      },
      {"position 5", "sees no cache slot"});
}

// ---- the decoder against the full forward --------------------------------------------------

struct DecodeFixture {
  ModelConfig cfg = testing::small_test_config(4);  // layers 1, 3 global; window 3
  ReferenceBackend be;
  std::vector<int32_t> tokens;
  DecodeFixture() {
    Rng rng(5);
    for (int i = 0; i < 13; ++i) tokens.push_back(int32_t(rng.uniform_int(cfg.vocab_size)));
  }
  int64_t S() const { return int64_t(tokens.size()); }
  // The soft-capped logits of every position from Gemma4Model::forward [S, V].
  Tensor forward_logits(Gemma4Model& model, const Tensor& w) {
    Batch b;
    b.batch = 1;
    b.seq = S();
    for (int64_t i = 0; i < S(); ++i) {
      b.inputs.push_back(tokens[i]);
      b.targets.push_back(0);
      b.positions.push_back(int32_t(i));
      b.segment_ids.push_back(1);
      b.target_segment_ids.push_back(1);
    }
    Tensor logits;
    model.forward(upload_batch(be, b), w, &logits);
    return logits;
  }
};

// Largest |difference| between decoder logits [V] and row p of the forward's.
double row_diff(const Tensor& got, const Tensor& ref, int64_t p) {
  return max_abs_diff(got, ref.rows(p, p + 1).view(got.shape()));
}

TEST(Decoder, PrefillAndStepsGiveTheForwardLogitsAtEveryPosition) {
  DecodeFixture f;
  ASSERT_GT(f.S(), 3 * f.cfg.sliding_window) << "the ring must wrap";
  ASSERT_FALSE(f.cfg.is_global(0));
  ASSERT_TRUE(f.cfg.is_global(1));
  for (DType dt : {DType::F64, DType::F32}) {
    Gemma4Model model(f.cfg, f.be, {dt, RematPolicy::None, 1});
    const Tensor w = random_weights(model.params(), 7, dt);
    const Tensor ref = f.forward_logits(model, w);
    double scale = 0;
    for (int64_t i = 0; i < ref.numel(); ++i)
      scale = std::max(scale, std::abs(get_as_double(ref, i)));
    const double tol = dt == DType::F64 ? 1e-12 : 2e-5 * scale;
    std::vector<int32_t> toks = f.tokens;

    // One token at a time: a ring of exactly `window` slots.
    double worst_steps = 0;
    {
      Decoder d(model, w, {f.S(), /*prefill_chunk=*/1});
      EXPECT_EQ(d.cache_slots(0), f.cfg.sliding_window);
      worst_steps = row_diff(d.prefill(std::span(toks).first(1)), ref, 0);
      for (int64_t p = 1; p < f.S(); ++p)
        worst_steps = std::max(worst_steps, row_diff(d.step(toks[p]), ref, p));
    }
    // The whole sequence in prefill chunks of 4 (ring of 6 slots, wrapping inside chunks).
    double worst_prefill = 0;
    {
      Decoder d(model, w, {f.S(), /*prefill_chunk=*/4});
      EXPECT_EQ(d.cache_slots(0), f.cfg.sliding_window + 3);
      Tensor all;
      const Tensor last = d.prefill(toks, &all);
      worst_prefill = max_abs_diff(all, ref);
      EXPECT_EQ(max_abs_diff(last, all.rows(f.S() - 1, f.S()).view(last.shape())), 0.0);
      EXPECT_EQ(d.length(), f.S());
    }
    // A prompt of 5 (chunks of the window), then steps: what generation does.
    double worst_mixed = 0;
    {
      Decoder d(model, w, {f.S(), 0});
      worst_mixed = row_diff(d.prefill(std::span(toks).first(5)), ref, 4);
      for (int64_t p = 5; p < f.S(); ++p)
        worst_mixed = std::max(worst_mixed, row_diff(d.step(toks[p]), ref, p));
      // The decoder is full: one more position is a clear error.
      expect_error([&] { d.step(0); }, {"exceed max_length 13"});
    }
    EXPECT_LE(worst_steps, tol) << dtype_name(dt);
    EXPECT_LE(worst_prefill, tol) << dtype_name(dt);
    EXPECT_LE(worst_mixed, tol) << dtype_name(dt);
    std::cout << "decode vs forward, " << dtype_name(dt) << " (max |logit| " << scale << "): steps "
              << worst_steps << ", prefill chunks of 4 " << worst_prefill << ", prefill 5 + steps "
              << worst_mixed << "\n";
    ::testing::Test::RecordProperty(
        std::string("max_abs_diff_") + std::string(dtype_name(dt)),
        std::to_string(std::max({worst_steps, worst_prefill, worst_mixed})));
  }
}

TEST(Decoder, SlidingLayersKeepOnlyTheirWindow) {
  DecodeFixture f;
  ReferenceBackend& be = f.be;
  Gemma4Model model(f.cfg, be, {DType::F32, RematPolicy::None, 1});
  const Tensor w = random_weights(model.params(), 3, DType::F32);
  Decoder short_run(model, w, {16, 1}), long_run(model, w, {4096, 1});
  for (int64_t l = 0; l < f.cfg.num_layers; ++l) {
    if (f.cfg.is_global(l)) {
      EXPECT_EQ(long_run.cache_slots(l), 4096);
    } else {
      EXPECT_EQ(short_run.cache_slots(l), f.cfg.sliding_window) << "layer " << l;
      EXPECT_EQ(long_run.cache_slots(l), f.cfg.sliding_window) << "layer " << l;
    }
  }
  // Only the global layers grow with the length: (k + v) * KV * hd floats + a position.
  const size_t per_global_position =
      size_t(2 * f.cfg.global_num_kv_heads * f.cfg.global_head_dim * 4 + 4);
  EXPECT_EQ(long_run.cache_bytes() - short_run.cache_bytes(),
            size_t(f.cfg.num_global_layers()) * (4096 - 16) * per_global_position);
  // A prefill chunk longer than the sequence is clamped; a short run never exceeds its length.
  Decoder tiny(model, w, {2, 0});
  EXPECT_EQ(tiny.cache_slots(0), 2);
  EXPECT_EQ(tiny.cache_slots(1), 2);
  // Decoding far past the window allocates nothing more.
  const size_t bytes = long_run.cache_bytes();
  for (int64_t p = 0; p < 100; ++p) long_run.step(f.tokens[p % f.tokens.size()]);
  EXPECT_EQ(long_run.length(), 100);
  EXPECT_EQ(long_run.cache_bytes(), bytes);
}

// ---- the sampler -------------------------------------------------------------------------------

std::vector<double> random_logits(int64_t V, uint64_t seed, double scale = 2.0) {
  Rng rng(seed);
  std::vector<double> l(V);
  for (double& x : l) x = scale * rng.normal();
  return l;
}

int32_t argmax(const std::vector<double>& l) {
  return int32_t(std::max_element(l.begin(), l.end()) - l.begin());  // first of equal maxima
}

TEST(Sampler, GreedyTopK1AndTinyTopPAllPickTheArgmax) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<double> l = random_logits(50, seed);
    l[7] = l[31] = *std::max_element(l.begin(), l.end()) + 1;  // a tie: the lower id wins
    const int32_t best = argmax(l);
    ASSERT_EQ(best, 7);
    Sampler greedy({.temperature = 0, .seed = seed});
    Sampler top1({.temperature = 1.5, .top_k = 1, .seed = seed});
    Sampler nucleus({.temperature = 1.5, .top_p = 1e-9, .seed = seed});
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(greedy.sample(l), best);
      EXPECT_EQ(top1.sample(l), best);
      EXPECT_EQ(nucleus.sample(l), best);
    }
  }
}

// What the sampler should draw from, computed directly: softmax(l / T), restricted to the top
// k, then to the smallest most-likely prefix reaching top_p, renormalised.
std::vector<double> expected_distribution(const std::vector<double>& l, double T, int64_t k,
                                          double top_p) {
  const int64_t V = int64_t(l.size());
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  const int64_t keep_k = k > 0 ? std::min(k, V) : V;
  std::vector<double> p(V, 0.0);
  double z = 0;
  for (int64_t j = 0; j < keep_k; ++j) z += std::exp(l[order[j]] / T);
  double cum = 0;
  for (int64_t j = 0; j < keep_k; ++j) {
    p[order[j]] = std::exp(l[order[j]] / T) / z;
    cum += p[order[j]];
    if (cum >= top_p) break;
  }
  const double kept = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= kept;
  return p;
}

TEST(Sampler, EmpiricalDistributionMatchesTheFilteredSoftmax) {
  const int64_t V = 12, N = 200000;
  const std::vector<double> l = random_logits(V, 99, 1.0);
  struct Case {
    double T;
    int64_t k;
    double p;
  };
  for (const Case c : {Case{1.0, V, 1.0}, Case{1.0, 0, 1.0}, Case{0.7, 0, 1.0}, Case{1.3, 5, 1.0},
                       Case{1.0, 0, 0.8}, Case{2.0, 6, 0.9}}) {
    const std::vector<double> expected = expected_distribution(l, c.T, c.k, c.p);
    Sampler s({.temperature = c.T, .top_k = c.k, .top_p = c.p, .seed = 1234});
    std::vector<int64_t> count(V, 0);
    for (int64_t i = 0; i < N; ++i) ++count[s.sample(l)];
    // Pearson's chi-square over the tokens that can be drawn; the others must never appear.
    double chi2 = 0;
    int64_t dof = -1;
    for (int64_t v = 0; v < V; ++v) {
      if (expected[v] == 0) {
        EXPECT_EQ(count[v], 0) << "token " << v << " is outside top_k / top_p";
        continue;
      }
      const double e = expected[v] * double(N);
      chi2 += (double(count[v]) - e) * (double(count[v]) - e) / e;
      ++dof;
    }
    // Mean dof, sd sqrt(2 dof): 5 sd is far in the tail for a correct sampler, while a wrong
    // temperature or filter moves chi2 into the thousands at this N.
    EXPECT_LT(chi2, double(dof) + 5 * std::sqrt(2.0 * double(dof)) + 1)
        << "T " << c.T << " k " << c.k << " p " << c.p;
  }
}

TEST(Sampler, SameSeedSameTokensAndFloat32LogitsWork) {
  const std::vector<double> l = random_logits(40, 3);
  Tensor t32 = Tensor::empty({40}, DType::F32);
  for (int64_t i = 0; i < 40; ++i) set_from_double(t32, i, l[i]);
  Sampler a({.seed = 5}), b({.seed = 5}), c({.seed = 6});
  std::vector<int32_t> xa, xb, xc;
  for (int i = 0; i < 50; ++i) {
    xa.push_back(a.sample(l));
    xb.push_back(b.sample(t32));
    xc.push_back(c.sample(l));
  }
  // float32 rounding of the logits could flip a draw in principle; not with these values.
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

TEST(Sampler, BadOptionsAreNamed) {
  expect_error([] { Sampler s({.temperature = -1}); }, {"temperature", ">= 0"});
  expect_error([] { Sampler s({.top_k = -2}); }, {"top_k"});
  expect_error([] { Sampler s({.top_p = 0}); }, {"top_p", "(0, 1]"});
  expect_error([] { Sampler s({.top_p = 1.5}); }, {"top_p"});
  expect_error([] { Sampler s({.max_new_tokens = 0}); }, {"max_new_tokens"});
  Sampler s({});
  const std::vector<double> nan_logits = {0.0, std::nan("")};
  expect_error([&] { s.sample(nan_logits); }, {"NaN"});
}

// ---- generate() --------------------------------------------------------------------------------

// A byte-level model: small_test_config with the byte tokenizer's vocabulary.
ModelConfig byte_config() {
  ModelConfig c = testing::small_test_config(2);
  c.vocab_size = kByteVocabSize;
  return c;
}

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

// ---- the command -------------------------------------------------------------------------------

using testing::CliResult;
constexpr auto& gemmax = testing::run_gemmax;
// stdout alone (the text), and stderr into *err (the statistics).
CliResult gemmax_stdout(const std::string& args, std::string* err) {
  static const TempDir logs;
  CliResult r;
  const std::string err_file = logs / "stderr.txt";
  r.status = testing::run_command(
      "(" + std::string(GEMMAX_BINARY) + " " + args + " 2>" + err_file + ")", &r.out);
  *err = testing::read_file(err_file);
  return r;
}

TEST(SampleCli, GeneratesFromAHuggingFaceFolder) {
  TempDir dir;
  const ModelConfig cfg = byte_config();
  const ParamTable table(cfg);
  const Tensor w = random_weights(table, 4, DType::F32);
  write_hf_checkpoint(dir.str(), hf_named_tensors(table, w, "model.", DType::F32), 1 << 30);
  write_hf_config(cfg, DType::F32, dir / "config.json");
  const std::string model = " --model " + dir.str();

  std::string err;
  const CliResult r = gemmax_stdout(
      "sample" + model + " --prompt 'Hello' --max_new_tokens 8 --temperature 0", &err);
  ASSERT_EQ(r.status, 0) << r.out << err;
  EXPECT_EQ(r.out.rfind("Hello", 0), 0u) << r.out;
  EXPECT_NE(err.find("prompt 6 tokens | generated "), std::string::npos) << err;
  EXPECT_NE(err.find("| decode "), std::string::npos) << err;
  EXPECT_NE(err.find(" tokens/s"), std::string::npos) << err;

  // The command's greedy text is generate()'s on the same weights.
  ReferenceBackend be;
  const HfModelFolder folder = read_hf_model_folder(dir.str());
  Gemma4Model m(folder.config, be, {DType::F32, RematPolicy::None, 1});
  const auto tok = make_byte_tokenizer();
  const std::string text =
      generate_text(m, w, *tok, "Hello", {.max_new_tokens = 8, .temperature = 0});
  EXPECT_EQ(r.out.rfind(text + "\n", 0), 0u) << "cli:\n" << r.out << "\nin process:\n" << text;

  // Sampling with a seed repeats.
  const std::string sampled =
      "sample" + model + " --prompt 'Hello' --max_new_tokens 12 --seed 3 --top_p 0.9";
  const CliResult s1 = gemmax_stdout(sampled, &err), s2 = gemmax_stdout(sampled, &err);
  ASSERT_EQ(s1.status, 0) << s1.out << err;
  EXPECT_EQ(s1.out, s2.out);
}

TEST(SampleCli, BadInputGivesTheFix) {
  TempDir dir;
  const ModelConfig cfg = testing::small_test_config(2);  // vocab 37 < the byte tokenizer's
  const ParamTable table(cfg);
  const Tensor w = random_weights(table, 4, DType::F32);
  write_hf_checkpoint(dir.str(), hf_named_tensors(table, w, "model.", DType::F32), 1 << 30);
  write_hf_config(cfg, DType::F32, dir / "config.json");
  const std::string model = " --model " + dir.str();
  auto expect_failure = [](const std::string& args, const std::vector<std::string>& parts) {
    const CliResult r = gemmax(args);
    EXPECT_NE(r.status, 0) << args;
    for (const auto& p : parts)
      EXPECT_NE(r.out.find(p), std::string::npos) << args << ":\n" << r.out;
  };
  expect_failure("sample --model " + dir.file("nothing") + " --prompt hi",
                 {"nothing", "does not exist"});
  expect_failure("sample" + model + " --prompt hi",
                 {"larger vocabulary than the model (37 tokens)"});
  expect_failure("sample" + model + " --prompt ''", {"--prompt is empty"});
  expect_failure("sample" + model, {"missing --prompt"});
  expect_failure("sample" + model + " --prompt hi --top_p 0", {"top_p must be in (0, 1]"});
  expect_failure("sample" + model + " --prompt hi --temperature -1", {"temperature"});
  expect_failure("sample" + model + " --prompt hi --max_new_tokens 0", {"max_new_tokens"});
  expect_failure("sample" + model + " --prompt hi --tokenizer words", {"--tokenizer 'words'"});
  expect_failure("sample" + model + " --prompt hi --tokenizer sentencepiece",
                 {"--tokenizer_path", "no tokenizer.model"});
  expect_failure("sample" + model + " --prompt hi --tokenizer_path " + dir.file("none.model"),
                 {"none.model", "no such file"});
  expect_failure("sample" + model + " --prompt hi --temprature 1", {"did you mean --temperature"});
  const CliResult help = gemmax("sample --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--top_p"), std::string::npos);
}

}  // namespace
}  // namespace gemmax
