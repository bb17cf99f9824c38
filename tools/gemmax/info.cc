// gemmax info [config.yml] [key=value ...]: a model's size and per-step FLOPs, without
// allocating it (works for the full 26B-A4B on a laptop).
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/data/arrow_reader.h"
#include "gemmax/base/error.h"
#include "gemmax/config/key_table.h"
#include "gemmax/config/train_config.h"
#include "gemmax/data/loader.h"
#include "gemmax/model/params.h"
#include "gemmax/train/eval.h"
#include "gemmax/train/flops.h"

namespace gemmax {
namespace {

// The first `n` training batches of the configured data, one JSON line each: per row the inputs,
// segment ids and positions (what the data pipeline feeds step 0, 1, ...).
int print_batches(int64_t n, int argc, char** argv) {
  const TrainConfig tc = train_config_from(config_from_args(argc, argv));
  auto data = make_data_loader(run_data_options(tc, tc.model.vocab_size, 0, 1));
  std::cerr << data->describe() << "\n";
  for (int64_t step = 0; step < n; ++step) {
    const Batch b = data->next();
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t r = 0; r < b.batch; ++r) {
      const auto row = [&](const std::vector<int32_t>& v) {
        return std::vector<int32_t>(v.begin() + r * b.seq, v.begin() + (r + 1) * b.seq);
      };
      rows.push_back({{"inputs", row(b.inputs)},
                      {"segment_ids", row(b.segment_ids)},
                      {"positions", row(b.positions)}});
    }
    std::cout << nlohmann::json{{"step", step}, {"rows", rows}}.dump() << "\n";
  }
  return 0;
}

// Whether Parquet and Arrow files can be read here (dataset_type=hf).
void print_arrow() { std::cout << "parquet/arrow:       " << arrow_module_status() << "\n"; }

// The backends this installation can run: the built-in ones, and the cuda module, loaded and
// asked for a device.
int print_backends() {
  std::cout << "cpu:                 built in\n"
               "reference:           built in (the plain loops every backend is tested against)\n"
               "cuda_emulated:       built in (the cuda kernels run on the host, for tests)\n";
  std::string why;
  if (!cuda::cuda_module_loads(&why)) {
    std::cout << "cuda:                cannot load: " << why << "\n";
    print_arrow();
    return 0;
  }
  const cuda::LoadedModule& m = cuda::cuda_module();
  std::cout << "cuda:                module " << m.path << "\n"
            << "  built with:        " << m.versions << "\n"
            << "  cuDNN attention:   "
            << (m.cudnn_unavailable.empty() ? "frontend " + m.cudnn_frontend_version
                                            : "no: " + m.cudnn_unavailable)
            << "\n"
            << "  NCCL comm:         " << (m.has_nccl ? "yes" : "no (built without NCCL)") << "\n";
  const bool device = cuda::cuda_device_available(&why);
  std::cout << "  device:            " << (device ? "yes" : "none: " + why) << "\n";
  print_arrow();
  return 0;
}

}  // namespace

int cmd_info(int argc, char** argv) {
  if (argc > 0 && (!std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "-h"))) {
    std::cout << "usage: gemmax info [config.yml] [key=value ...]\n"
                 "Prints the parameter counts and the training FLOPs per step of a model.\n"
                 "Example: gemmax info model_name=gemma4-26b-a4b per_device_batch_size=1 "
                 "max_target_length=4096\n"
                 "gemmax info --keys prints every config key (type, default, range, help) and\n"
                 "MaxText's keys as JSON; scripts/config_docs.py renders configs/base.yml and\n"
                 "docs/MAXTEXT.md from it.\n"
                 "gemmax info --batches N [config.yml] [key=value ...] prints the first N "
                 "training batches\n(one JSON line each: per row inputs, segment_ids, "
                 "positions).\n"
                 "gemmax info --backends loads the cuda module (libgemmax_cuda.so) and prints which\n"
                 "backends this installation can run, and why not, and whether it reads Parquet\n"
                 "and Arrow files (the Arrow module, libgemmax_arrow.so).\n";
    return 0;
  }
  if (argc == 1 && !std::strcmp(argv[0], "--backends")) return print_backends();
  if (argc >= 2 && !std::strcmp(argv[0], "--batches")) {
    char* end = nullptr;
    const long long n = std::strtoll(argv[1], &end, 10);
    if (*argv[1] == 0 || *end != 0 || n < 1)
      fail("gemmax info --batches N: N must be a positive integer, got '", argv[1], "'");
    return print_batches(n, argc - 2, argv + 2);
  }
  if (argc == 1 && !std::strcmp(argv[0], "--keys")) {
    std::cout << key_table_json() << "\n";
    return 0;
  }
  const Config config = config_from_args(argc, argv);
  const TrainConfig tc = train_config_from(config);
  const ModelConfig& mc = tc.model;
  const ParamTable table(mc);
  const int64_t B = tc.step.per_device_batch_size, S = tc.step.max_target_length;
  const StepFlops f = training_flops(mc, B, S);
  std::cout << std::fixed;
  std::cout << "model:               " << mc.name << "\n";
  std::cout << "parameters:          " << table.total() << " total\n";
  std::cout << "active per token:    " << table.active() << "\n";
  std::cout << "parameter tensors:   " << table.specs().size() << "\n";
  std::cout << std::setprecision(3);
  std::cout << "per step (" << B << " x " << S << " tokens): " << f.total() / 1e12
            << " TFLOP = 3 x (learnable " << f.learnable / 1e12 << " + attention "
            << f.attention / 1e12 << ")\n";
  const double per_token = f.total() / (double(B) * double(S));
  std::cout << std::setprecision(2) << "per token:           "
            << (per_token < 1e9 ? per_token / 1e6 : per_token / 1e9)
            << (per_token < 1e9 ? " MFLOP\n" : " GFLOP\n");
  return 0;
}

}  // namespace gemmax
