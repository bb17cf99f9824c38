// gemmax bench [config.yml] [key=value ...] [--warmup N] [--steps N] [--json FILE]
//
// Times the training step: warm-up steps, then timed steps of the real step (the trainer's
// train_step and its one read of the metrics), then one step profiled by op family. Beside it,
// in the same run: the backend's dense bf16 matmul rate, its grouped matmul against a dense
// matmul of the same FLOPs at the model's expert shapes, and the machine's limit: each
// multiply-accumulate instruction's peak on every thread (backend/cpu/peaks.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/io/atomic_file.h"
#include "gemmax/io/no_clobber.h"
#include <numeric>
#include <sstream>

#include "bench_attention.h"
#include "commands.h"
#include "flags.h"
#include "gemmax/backend/cpu/peaks.h"
#include "gemmax/backend/profiling_backend.h"
#include "gemmax/train/eval.h"
#include "gemmax/base/rng.h"
#include "gemmax/base/timer.h"
#include "gemmax/io/atomic_file.h"
#include "gemmax/io/no_clobber.h"
#include "gemmax/data/loader.h"
#include "gemmax/train/flops.h"
#include "gemmax/train/memory_budget.h"
#include "gemmax/train/step.h"

namespace gemmax {
namespace {

constexpr const char* kUsage =
    "usage: gemmax bench [config.yml] [key=value ...] [--warmup N] [--steps N] [--json FILE]\n"
    "                    [--attention]\n\n"
    "Times training steps of the configured model and backend (default: model_name=gemma4-small\n"
    "dataset_type=synthetic, the preset's batch and sequence) and prints step time, tokens/s,\n"
    "model TFLOP/s (MaxText's count) and executed TFLOP/s (products and attention, remat\n"
    "recompute included), the dense bf16 matmul rate measured in the same run and the ratio to\n"
    "it, the grouped matmul against a dense matmul of the same FLOPs at the expert shapes, the\n"
    "peak of each multiply-accumulate instruction of this CPU on every thread and model TFLOP/s\n"
    "as a fraction of the best, and one step's time by op family. --json FILE writes the same\n"
    "figures. --attention times only attention, forward and backward, at the model's sliding\n"
    "and global layers (TFLOP/s over the visible pairs; the backward counted as 2.5 forwards).\n";

Tensor random_bf16(Backend& be, const Shape& s, Rng& rng, double scale) {
  Tensor host = Tensor::empty(s, DType::BF16);
  for (int64_t i = 0; i < host.numel(); ++i)
    host.data<bf16>()[i] = bf16(float(scale * rng.normal()));
  return be.to_device(host, MemKind::Workspace);
}

struct GmmFigures {
  std::string what;
  double gmm_tflops = 0, dense_tflops = 0;
  double ratio() const { return gmm_tflops / dense_tflops; }
};

// The grouped matmuls of one MoE layer of the model (T*K rows over E experts, routed uniformly
// at random) against dense matmuls of the same shapes, rows not split by expert.
std::vector<GmmFigures> grouped_vs_dense(Backend& be, const ModelConfig& c, int64_t tokens) {
  const int64_t E = c.num_experts, K = c.num_experts_per_tok, D = c.d_model, F = c.moe_mlp_dim;
  const int64_t m = tokens * K;
  Rng rng(1);
  std::vector<int32_t> sizes(size_t(E), 0);
  for (int64_t r = 0; r < m; ++r) ++sizes[size_t(rng.uniform_int(E))];
  Tensor host_sizes = Tensor::empty({E}, DType::I32);
  std::copy(sizes.begin(), sizes.end(), host_sizes.data<int32_t>());
  const Tensor group_sizes = be.to_device(host_sizes, MemKind::Workspace);
  const Tensor x = random_bf16(be, {m, D}, rng, 1.0),
               wi = random_bf16(be, {E, 2 * F, D}, rng, 0.05);
  const Tensor h = random_bf16(be, {m, 2 * F}, rng, 1.0),
               wd = random_bf16(be, {E, D, F}, rng, 0.05);
  const Tensor a = random_bf16(be, {m, F}, rng, 1.0), dy = random_bf16(be, {m, D}, rng, 1.0);
  const Tensor dense_wi = random_bf16(be, {2 * F, D}, rng, 0.05);
  const Tensor dense_wd = random_bf16(be, {D, F}, rng, 0.05);
  Tensor out_h = be.alloc({m, 2 * F}, DType::BF16, MemKind::Workspace);
  Tensor out_y = be.alloc({m, D}, DType::BF16, MemKind::Workspace);
  Tensor out_a = be.alloc({m, F}, DType::BF16, MemKind::Workspace);
  Tensor out_x = be.alloc({m, D}, DType::BF16, MemKind::Workspace);
  Tensor g_wi = be.zeros({E, 2 * F, D}, DType::F32, MemKind::Workspace);
  Tensor g_wd = be.zeros({E, D, F}, DType::F32, MemKind::Workspace);
  Tensor dg_wi = be.zeros({2 * F, D}, DType::F32, MemKind::Workspace);
  Tensor dg_wd = be.zeros({D, F}, DType::F32, MemKind::Workspace);
  const double up = 2.0 * double(m) * double(2 * F) * double(D);
  const double down = 2.0 * double(m) * double(D) * double(F);
  auto sync = [&](const std::function<void()>& f) {
    return [&be, f] {
      f();
      be.synchronize();
    };
  };
  std::vector<GmmFigures> out;
  out.push_back({"gate_up forward",
                 best_rate(up, sync([&] {
                             be.gmm(
                                 {.out = out_h, .lhs = x, .rhs = wi, .group_sizes = group_sizes});
                           })) /
                     1e12,
                 best_rate(up, sync([&] {
                             be.matmul({.c = out_h,
                                        .a = x,
                                        .trans_a = false,
                                        .b = dense_wi,
                                        .trans_b = true,
                                        .accumulate = false});
                           })) /
                     1e12});
  out.push_back({"down forward",
                 best_rate(down, sync([&] {
                             be.gmm(
                                 {.out = out_y, .lhs = a, .rhs = wd, .group_sizes = group_sizes});
                           })) /
                     1e12,
                 best_rate(down, sync([&] {
                             be.matmul({.c = out_y,
                                        .a = a,
                                        .trans_a = false,
                                        .b = dense_wd,
                                        .trans_b = true,
                                        .accumulate = false});
                           })) /
                     1e12});
  out.push_back(
      {"down dlhs",
       best_rate(down, sync([&] {
                   be.gmm_dlhs({.dlhs = out_a, .dout = dy, .rhs = wd, .group_sizes = group_sizes});
                 })) /
           1e12,
       best_rate(down, sync([&] {
                   be.matmul({.c = out_a,
                              .a = dy,
                              .trans_a = false,
                              .b = dense_wd,
                              .trans_b = false,
                              .accumulate = false});
                 })) /
           1e12});
  out.push_back({"down drhs",
                 best_rate(down, sync([&] {
                             be.gmm_drhs(
                                 {.drhs = g_wd, .lhs = a, .dout = dy, .group_sizes = group_sizes});
                           })) /
                     1e12,
                 best_rate(down, sync([&] {
                             be.matmul({.c = dg_wd,
                                        .a = dy,
                                        .trans_a = true,
                                        .b = a,
                                        .trans_b = false,
                                        .accumulate = true});
                           })) /
                     1e12});
  out.push_back({"gate_up dlhs",
                 best_rate(up, sync([&] {
                             be.gmm_dlhs(
                                 {.dlhs = out_x, .dout = h, .rhs = wi, .group_sizes = group_sizes});
                           })) /
                     1e12,
                 best_rate(up, sync([&] {
                             be.matmul({.c = out_x,
                                        .a = h,
                                        .trans_a = false,
                                        .b = dense_wi,
                                        .trans_b = false,
                                        .accumulate = false});
                           })) /
                     1e12});
  out.push_back({"gate_up drhs",
                 best_rate(up, sync([&] {
                             be.gmm_drhs(
                                 {.drhs = g_wi, .lhs = x, .dout = h, .group_sizes = group_sizes});
                           })) /
                     1e12,
                 best_rate(up, sync([&] {
                             be.matmul({.c = dg_wi,
                                        .a = h,
                                        .trans_a = true,
                                        .b = x,
                                        .trans_b = false,
                                        .accumulate = true});
                           })) /
                     1e12});
  return out;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const Flags flags("bench", argc, argv, {{"warmup"}, {"steps"}, {"json"}, {"attention", false}},
                    true);
  if (flags.help()) {
    std::cout << kUsage;
    return 0;
  }
  const int64_t warmup = flags.get_int("warmup", 2), steps = flags.get_int("steps", 5);
  const std::string json_path = flags.get("json", "");
  if (warmup < 0 || steps < 1) fail("gemmax bench: --warmup must be >= 0 and --steps >= 1");
  std::vector<std::string> rest_args = flags.positional();
  std::vector<char*> rest;
  for (std::string& a : rest_args) rest.push_back(a.data());
  // The bench's defaults for keys the user did not set: the CPU benchmark model, synthetic data.
  const Config user = config_from_args(int(rest.size()), rest.data());
  std::vector<std::string> extra;
  for (const char* kv : {"model_name=gemma4-small", "dataset_type=synthetic"}) {
    const std::string key = std::string(kv).substr(0, std::string(kv).find('='));
    if (!user.set_by_user(key)) extra.push_back(kv);
  }
  std::vector<std::string> args(rest.begin(), rest.end());
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argp;
  for (std::string& s : args) argp.push_back(s.data());
  const TrainConfig config = train_config_from(config_from_args(int(argp.size()), argp.data()));
  if (!json_path.empty()) {
    // Refused now, not after minutes of timing: --json over an input, or in no folder.
    std::vector<PathRole> inputs = {{config.data.dataset_path, "dataset_path"},
                                    {config.data.tokenizer_path, "tokenizer_path"}};
    for (const std::string& a : rest_args)
      if (a.find('=') == std::string::npos) inputs.push_back({a, "the config file"});
    refuse_outputs_over_inputs({{json_path, "--json"}}, inputs);
    const std::filesystem::path parent =
        std::filesystem::absolute(json_path).parent_path();
    if (!std::filesystem::is_directory(parent))
      fail("gemmax bench: --json '", json_path, "': the folder '", parent.string(),
           "' does not exist");
  }

  const MemoryPlanInput plan_in = memory_plan_input(config);
  const ModelConfig& mc = plan_in.model;
  const auto real = make_backend(backend_options(config));
  if (flags.has("attention"))
    return print_attention_rates(*real, mc, plan_in.options, plan_in.batch, plan_in.seq, json_path);
  ProfilingBackend be(*real);
  be.set_enabled(false);
  Gemma4Model model(mc, be, plan_in.options);
  const ParamTable& table = model.params();
  // A LoRA run's step (enable_lora): its adapters and its frozen base, as the trainer makes them.
  std::optional<AdapterTable> adapters;
  if (plan_in.lora) adapters.emplace(table, *plan_in.lora);
  TrainState state =
      adapters ? make_lora_train_state(be, table, *adapters, plan_in.options.act, plan_in.weight,
                                       AdamWConfig::from(config.optimizer), nullptr, FsdpOptions(),
                                       plan_in.lora->qtype, plan_in.lora->nf4_block)
               : make_train_state(be, table, trainable_params(table, config.run.freeze),
                                  plan_in.weight, AdamWConfig::from(config.optimizer));
  {
    const uint64_t seed = uint64_t(config.run.init_weights_seed);
    Tensor host = Tensor::empty({table.total()}, adapters ? plan_in.options.act : plan_in.weight);
    init_params(table, host, seed);
    upload_weights(be, table, state, host);
    if (adapters) {
      Tensor a = Tensor::empty({adapters->params().total()}, plan_in.weight);
      init_params(adapters->params(), a, seed);
      be.upload(state.weights, a);
    }
  }
  DataOptions d;
  d.dataset_type = name_of(config.data.dataset_type);
  d.dataset_path = config.data.dataset_path;
  d.tokenizer_type = run_tokenizer_type(config);
  d.tokenizer_path = config.data.tokenizer_path;
  d.batch = plan_in.batch;
  d.seq = plan_in.seq;
  d.vocab_size = mc.vocab_size;
  d.seed = uint64_t(config.data.data_shuffle_seed);
  const auto data = make_data_loader(d);
  const int64_t tokens = plan_in.batch * plan_in.seq;
  const StepFlops flops = training_flops(mc, plan_in.batch, plan_in.seq,
                                         adapters ? &*adapters : nullptr);
  const double model_tflop = (adapters ? flops.lora_total() : flops.total()) / 1e12;

  std::cout << "gemmax bench: " << mc.name << " | " << real->describe() << " | dtype "
            << dtype_name(plan_in.options.act) << " | remat "
            << name_of(plan_in.options.remat) << " | batch " << plan_in.batch << " x "
            << plan_in.seq << " | " << warmup << " warm-up + " << steps << " timed steps"
            << std::endl;
  auto one_step = [&](int64_t step) {
    const StepInputs in = upload_batch(be, data->next());
    train_step(be, model, state, in, 1e-4, step + 1);
    return read_step(be, model, state, in);
  };
  for (int64_t s = 0; s < warmup; ++s) one_step(s);
  std::vector<double> times;
  double last_loss = 0;
  for (int64_t s = 0; s < steps; ++s) {
    Timer t;
    last_loss = one_step(warmup + s).loss.total_loss;
    times.push_back(t.seconds());
  }
  be.set_enabled(true);
  Timer profiled_timer;
  one_step(warmup + steps);
  const double profiled_seconds = profiled_timer.seconds();
  be.set_enabled(false);
  const OpProfile prof = be.profile();

  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double executed_tflop = prof.total_flops() / 1e12;
  // The dense bf16 matmul rate of this backend, same run: [tokens, 4D] x [4D, 4D].
  Rng rng(2);
  const int64_t n = 4 * mc.d_model;
  const Tensor da = random_bf16(be, {tokens, n}, rng, 1.0), db = random_bf16(be, {n, n}, rng, 0.05);
  Tensor dc = be.alloc({tokens, n}, DType::BF16, MemKind::Workspace);
  const double dense = best_rate(2.0 * double(tokens) * double(n) * double(n),
                                 [&] {
                                   be.matmul({.c = dc,
                                              .a = da,
                                              .trans_a = false,
                                              .b = db,
                                              .trans_b = true,
                                              .accumulate = false});
                                   be.synchronize();
                                 }) /
                       1e12;
  const std::vector<GmmFigures> gmm =  // the dense model (gemma4-31b) has no grouped matmuls
      mc.has_moe() ? grouped_vs_dense(be, mc, tokens) : std::vector<GmmFigures>();
  // The cpu backend's limit, same run: every instruction's register-resident peak, all threads.
  std::vector<cpu::InstructionPeak> peaks;
  if (real->name() == "cpu") peaks = cpu::instruction_peaks(omp_get_max_threads());
  cpu::InstructionPeak best_peak;
  for (const cpu::InstructionPeak& p : peaks)
    if (p.tflops > best_peak.tflops) best_peak = p;
  const double model_over_peak = peaks.empty() ? 0.0 : model_tflop / median / best_peak.tflops;

  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << "step time           " << median << " s (median; min " << sorted.front() << ", max "
     << sorted.back() << "), last loss " << last_loss << "\n";
  os.precision(1);
  os << "tokens/s            " << double(tokens) / median << "\n";
  os.precision(3);
  os << "model TFLOP/s       " << model_tflop / median << " (" << model_tflop
     << " TFLOP/step, MaxText's count)\n";
  os << "executed TFLOP/s    " << executed_tflop / median << " (" << executed_tflop
     << " TFLOP/step: products and attention, remat recompute included)\n";
  os << "dense bf16 matmul   " << dense << " TFLOP/s ([" << tokens << ", " << n << "] x [" << n
     << ", " << n << "], same run)\n";
  os << "model / dense       " << model_tflop / median / dense << "\n";
  if (!peaks.empty()) {
    os << "instruction peaks (register-resident loops, " << best_peak.threads
       << " threads at once, same run):\n";
    for (const cpu::InstructionPeak& p : peaks)
      os << "  " << p.name << std::string(p.name.size() < 40 ? 40 - p.name.size() : 1, ' ')
         << p.tflops << " TFLOP/s (" << p.per_thread() << " per thread)\n";
    os << "model / best peak   " << model_over_peak << " (of " << best_peak.name << ")\n";
  }
  if (!gmm.empty())
    os << "grouped matmul vs dense at the expert shapes (" << tokens * mc.num_experts_per_tok
       << " rows, " << mc.num_experts << " experts):\n";
  for (const GmmFigures& g : gmm)
    os << "  " << g.what << std::string(16 - g.what.size(), ' ') << g.gmm_tflops << " vs "
       << g.dense_tflops << " TFLOP/s: " << g.ratio() << "\n";
  os << "time by op family (one profiled step, " << profiled_seconds << " s):\n";
  for (size_t f = 0; f < kNumOpFamilies; ++f) {
    const double s = prof.seconds[f];
    os << "  " << op_family_name(OpFamily(f))
       << std::string(30 - std::strlen(op_family_name(OpFamily(f))), ' ') << s << " s "
       << int(std::lround(100 * s / prof.total_seconds())) << "%";
    if (prof.flops[f] > 0) os << "  " << prof.flops[f] / s / 1e12 << " TFLOP/s";
    os << "\n";
  }
  std::cout << os.str();

  if (!json_path.empty()) {
    nlohmann::json j;
    j["model"] = mc.name;
    j["backend"] = real->describe();
    j["dtype"] = dtype_name(plan_in.options.act);
    j["remat"] = name_of(plan_in.options.remat);
    j["batch"] = plan_in.batch;
    j["seq"] = plan_in.seq;
    j["threads"] = omp_get_max_threads();
    j["step_seconds"] = times;
    j["step_seconds_median"] = median;
    j["tokens_per_sec"] = double(tokens) / median;
    j["model_tflop_per_step"] = model_tflop;
    j["model_tflops_per_sec"] = model_tflop / median;
    j["executed_tflop_per_step"] = executed_tflop;
    j["executed_tflops_per_sec"] = executed_tflop / median;
    j["dense_bf16_tflops_per_sec"] = dense;
    j["model_over_dense"] = model_tflop / median / dense;
    for (const cpu::InstructionPeak& p : peaks)
      j["instruction_peaks"][p.name] = {{"tflops", p.tflops}, {"per_thread", p.per_thread()}};
    if (!peaks.empty()) {
      j["best_peak"] = best_peak.name;
      j["model_over_best_peak"] = model_over_peak;
    }
    for (const GmmFigures& g : gmm)
      j["grouped_vs_dense"][g.what] = {
          {"grouped_tflops", g.gmm_tflops}, {"dense_tflops", g.dense_tflops}, {"ratio", g.ratio()}};
    for (size_t f = 0; f < kNumOpFamilies; ++f)
      j["time_by_family"][op_family_name(OpFamily(f))] = {
          {"seconds", prof.seconds[f]}, {"flops", prof.flops[f]}, {"calls", prof.calls[f]}};
    write_file_atomic(json_path, j.dump(2) + "\n");
    std::cout << "wrote " << json_path << "\n";
  }
  return 0;
}

}  // namespace gemmax
