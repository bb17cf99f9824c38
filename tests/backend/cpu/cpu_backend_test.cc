// The cpu backend's own properties, with each kernel family this CPU runs forced by cpu_kernels
// (isa.h: always avx2 and amx_emulated; avx512_fp32, avx512_bf16 and amx where the CPU has them):
// attention with small scratch, the whole model against the reference, bit-identical steps, and
// the run's report of its kernel family. Every op against the reference is the conformance suite
// (op_conformance.h), which runs every backend.
#include "gemmax/backend/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/convert.h"
#include "gemmax/model/gemma4.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax {
namespace {

struct Path {
  const char* name;
  std::string isa;
};
void PrintTo(const Path& p, std::ostream* os) { *os << p.name; }

std::vector<Path> paths() {
  std::vector<Path> v;
  for (cpu::Isa isa : {cpu::Isa::Avx2, cpu::Isa::AmxEmulated, cpu::Isa::Avx512Fp32,
                       cpu::Isa::Avx512Bf16, cpu::Isa::Amx})
    if (cpu::isa_runs_here(isa)) v.push_back({cpu::isa_name(isa), cpu::isa_name(isa)});
  return v;
}

// The cpu attention with scratch too small for its caches, as long sequences run it: 360 KiB
// repacks the backward's key panels per use and takes its keys in chunks; 170 KiB repacks the
// forward's (too little for the backward's blocks: forward only). The default scratch is the
// conformance suite's case AttentionOverManyBlocks (backend/ops/attention_test.cc), with its
// criterion against the fp64 reference.
class CpuAttentionScratch : public ::testing::TestWithParam<Path> {};

TEST_P(CpuAttentionScratch, SmallScratchMatchesTheReference) {
  for (const int64_t scratch_kib : {360, 170}) {
    SCOPED_TRACE("scratch " + std::to_string(scratch_kib) + " KiB");
    BackendOptions o;
    o.name = "cpu";
    o.num_threads = 2;
    o.isa = GetParam().isa;
    o.attention_scratch_bytes = scratch_kib << 10;
    conformance::Harness h(make_backend(o));
    conformance::attention_over_many_blocks(h, /*forward_only=*/scratch_kib == 170);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuAttentionScratch, ::testing::ValuesIn(paths()),
                         [](const auto& info) { return std::string(info.param.name); });

// More threads than (sequence, kv head) pairs, by other counts than the machine's: 3 threads split
// one pair's queries in 3 runs; 5 split each of two pairs' in 2, one thread idle, and one pair's
// in 5. The same cases against the fp64 reference.
TEST(CpuAttentionThreads, SplitPairsMatchTheReference) {
  for (const int threads : {3, 5}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    BackendOptions o;
    o.name = "cpu";
    o.num_threads = threads;
    conformance::Harness h(make_backend(o));
    conformance::attention_over_many_blocks(h, /*forward_only=*/false);
  }
}

}  // namespace
}  // namespace gemmax

namespace gemmax {
namespace {

// The whole model on the cpu backend against the reference: fp32 to fp32 rounding; bf16 within
// the bf16 criterion of bf16_test.cc (its gradient error no larger than 3x the fp32 gradient's
// change under one bf16 rounding of every weight, and below 10%). On the routed MoE, with
// every expert chosen (E = K) and on the dense layer (E = 1), with two sequences of two documents
// each.
class CpuModel : public ::testing::TestWithParam<Path> {};

TEST_P(CpuModel, LossAndGradientsMatchTheReference) {
  for (int64_t experts : {5, 2, 1}) {  // 1: the dense layer (gemma4-31b)
    ModelConfig cfg = testing::small_test_config(2);
    cfg.d_model = 32;
    cfg.vocab_size = 64;
    cfg.num_experts = experts;
    const ParamTable table(cfg);
    ReferenceBackend ref;
    BackendOptions o;
    o.num_threads = 2;
    o.isa = GetParam().isa;
    CpuBackend cpu(o);
    const Batch batch = testing::make_batch(2, 16, cfg.vocab_size, 5, 9);
    auto grads = [&](Backend& be, DType act, const Tensor& w, LossInfo* info) {
      const StepInputs in = upload_batch(be, batch);
      Tensor g = Tensor::zeros({table.total()}, DType::F32);
      *info = Gemma4Model(cfg, be, {act, RematPolicy::Full, 2}).forward_backward(in, w, g);
      return g;
    };
    const Tensor w = testing::trained_like_weights(table, 0.0, 0);
    LossInfo lr, lc, lcb, ln;
    const Tensor gr = grads(ref, DType::F32, w, &lr), gc = grads(cpu, DType::F32, w, &lc);
    EXPECT_NEAR(lc.total_loss, lr.total_loss, 1e-6 * lr.total_loss) << experts;
    EXPECT_LE(testing::relative_l2(gr, gc), 1e-5) << experts << " experts, fp32";
    const Tensor gcb = grads(cpu, DType::BF16, w, &lcb);
    const Tensor gn =
        grads(ref, DType::F32, testing::trained_like_weights(table, std::ldexp(1.0, -9), 11), &ln);
    const double bf16_err = testing::relative_l2(gr, gcb), noise_err = testing::relative_l2(gr, gn);
    EXPECT_NEAR(lcb.total_loss, lr.total_loss, 1e-2 * lr.total_loss) << experts;
    EXPECT_LE(bf16_err, 3 * noise_err) << experts << " experts";
    EXPECT_LE(bf16_err, 0.1) << experts << " experts";
    ::testing::Test::RecordProperty(
        "cpu_bf16_grad_error_" + GetParam().isa + "_E" + std::to_string(experts),
        std::to_string(bf16_err));
  }
}

// Sequences of several key blocks (300 positions: 3 blocks of 128 keys) with a window that
// spans blocks: the whole model's fp32 loss and gradients on the cpu backend against the
// reference.
TEST(CpuModel, LongSequencesMatchTheReference) {
  ModelConfig cfg = testing::small_test_config(2);
  cfg.d_model = 32;
  cfg.vocab_size = 64;
  cfg.sliding_window = 150;
  const ParamTable table(cfg);
  ReferenceBackend ref;
  BackendOptions o;
  o.num_threads = 2;
  CpuBackend cpu(o);
  const Batch batch = testing::make_batch(2, 300, cfg.vocab_size, 5, 170);
  const Tensor w = testing::trained_like_weights(table, 0.0, 0);
  auto grads = [&](Backend& be, LossInfo* info) {
    const StepInputs in = upload_batch(be, batch);
    Tensor g = Tensor::zeros({table.total()}, DType::F32);
    *info = Gemma4Model(cfg, be, {DType::F32, RematPolicy::Full, 2}).forward_backward(in, w, g);
    return g;
  };
  LossInfo lr, lc;
  const Tensor gr = grads(ref, &lr), gc = grads(cpu, &lc);
  EXPECT_NEAR(lc.total_loss, lr.total_loss, 1e-6 * lr.total_loss);
  EXPECT_LE(testing::relative_l2(gr, gc), 1e-5);
}

// With 2 threads the cpu backend's step is the same bit for bit from run to run, and under
// every remat policy (the recompute re-runs the same kernels on the same inputs), with each
// kernel family.
TEST_P(CpuModel, TwoThreadStepsAreBitIdenticalAcrossRunsAndRematPolicies) {
  ModelConfig cfg = testing::small_test_config(2);
  cfg.d_model = 64;
  cfg.vocab_size = 300;
  const ParamTable table(cfg);
  BackendOptions o;
  o.num_threads = 2;
  o.isa = GetParam().isa;
  CpuBackend cpu(o);
  const StepInputs in = upload_batch(cpu, testing::make_batch(2, 64, cfg.vocab_size, 5, 30));
  const Tensor w = testing::trained_like_weights(table, 0.0, 0);
  std::vector<Tensor> grads;
  std::vector<double> losses;
  for (RematPolicy p :
       {RematPolicy::Full, RematPolicy::Full, RematPolicy::None, RematPolicy::Minimal}) {
    grads.push_back(Tensor::zeros({table.total()}, DType::F32));
    losses.push_back(Gemma4Model(cfg, cpu, {DType::BF16, p, 4})
                         .forward_backward(in, w, grads.back())
                         .total_loss);
  }
  for (size_t i = 1; i < grads.size(); ++i) {
    EXPECT_EQ(losses[i], losses[0]) << i;
    EXPECT_EQ(0, std::memcmp(grads[i].raw(), grads[0].raw(), grads[0].nbytes())) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuModel, ::testing::ValuesIn(paths()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gemmax

namespace gemmax {
namespace {

// Without AVX-512 the cpu backend runs its avx2 kernels and says so in one line; forced
// here by cpu_kernels=avx2. The run trains.
TEST(CpuRun, Avx2PathTrainsAndSaysSo) {
  testing::TempDir dir;
  std::string out;
  const std::string cmd = std::string(GEMMAX_BINARY) + " train base_output_directory=" + dir.str() +
                          " run_name=p cpu_kernels=avx2 base_emb_dim=32 max_target_length=32 "
                          "per_device_batch_size=2 steps=3 sample_max_new_tokens=0";
  ASSERT_EQ(testing::run_command(cmd, &out), 0) << out;
  EXPECT_NE(out.find("backend cpu (avx2 kernels, slower: "), std::string::npos) << out;
  EXPECT_NE(out.find("done: 3 steps"), std::string::npos) << out;
  EXPECT_NE(out.find("forced by cpu_kernels=avx2"), std::string::npos) << out;
  // cpu_isa, the key's former name, still works (older run folders' configs and checkpoints).
  out.clear();
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " train base_output_directory=" +
                                     dir.str() + " run_name=q cpu_isa=avx2 base_emb_dim=32 " +
                                     "max_target_length=32 per_device_batch_size=2 steps=1 " +
                                     "sample_max_new_tokens=0",
                                 &out),
            0)
      << out;
  EXPECT_NE(out.find("backend cpu (avx2 kernels, slower: "), std::string::npos) << out;
  out.clear();
  EXPECT_NE(
      testing::run_command(std::string(GEMMAX_BINARY) + " train cpu_kernels=sse9 steps=1", &out),
      0);
  EXPECT_NE(out.find("cpu_kernels='sse9': expected auto, amx, amx_emulated, avx512_fp32, "
                     "avx512_bf16 or avx2"),
            std::string::npos)
      << out;
}

// A family this CPU cannot run is refused before any step, naming what the CPU lacks and the
// choice that works; auto's choice always runs and says why.
TEST(CpuRun, AKernelThisCpuCannotRunIsAClearError) {
  std::string why;
  EXPECT_TRUE(cpu::isa_runs_here(cpu::choose_isa("auto", &why)));
  EXPECT_EQ(why.rfind("auto: ", 0), 0u) << why;
  int refused = 0;
  for (cpu::Isa isa : {cpu::Isa::Amx, cpu::Isa::Avx512Fp32, cpu::Isa::Avx512Bf16}) {
    if (cpu::isa_runs_here(isa)) continue;
    ++refused;
    const std::string name = cpu::isa_name(isa);
    testing::TempDir dir;
    std::string out;
    EXPECT_NE(testing::run_command(std::string(GEMMAX_BINARY) + " train base_output_directory=" +
                                       dir.str() + " cpu_kernels=" + name + " steps=1",
                                   &out),
              0);
    EXPECT_NE(out.find("cpu_kernels=" + name + ": this CPU ("), std::string::npos) << out;
    EXPECT_NE(out.find("; use cpu_kernels=auto ("), std::string::npos) << out;
    EXPECT_EQ(out.find("step 1"), std::string::npos) << out;
  }
  if (refused == 0) GTEST_SKIP() << "this CPU runs every kernel family";
}

// gemmax bench names the kernel family and why, and prints the machine's limit: the peak of
// every multiply-accumulate instruction this CPU has, measured in the same run, and model
// TFLOP/s as a fraction of the best (figures checked for presence and sense, not speed).
TEST(CpuRun, BenchPrintsTheFamilyAndTheInstructionPeaks) {
  testing::TempDir dir;
  const std::string json = dir.str() + "/bench.json";
  std::string out;
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) +
                                     " bench model_name=gemma4-tiny num_threads=2 cpu_kernels=avx2 "
                                     "--warmup 0 --steps 1 --json " +
                                     json,
                                 &out),
            0)
      << out;
  EXPECT_NE(out.find("cpu (avx2 kernels, slower: forced by cpu_kernels=avx2; 2 threads)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("instruction peaks (register-resident loops, 2 threads at once"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("fp32 FMA ymm (vfmadd231ps, AVX2)"), std::string::npos) << out;
  const auto& f = cpu::cpu_features();
  EXPECT_EQ(out.find("bf16 dot zmm") != std::string::npos, f.avx512_bf16) << out;
  EXPECT_EQ(out.find("fp32 FMA zmm") != std::string::npos, f.avx512) << out;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_GT(j["model_over_best_peak"].get<double>(), 0.0);
  EXPECT_LT(j["model_over_best_peak"].get<double>(), 1.0);  // no step beats the instruction
  for (const auto& [name, peak] : j["instruction_peaks"].items())
    EXPECT_GT(peak["tflops"].get<double>(), 0.0) << name;
}

}  // namespace
}  // namespace gemmax
