// The YAML config with key=value overrides, as `gemmax train FILE.yml key=value ...` reads them:
// the input is the YAML file, then (after a "\n--overrides--\n" line) one override per line.
// A config that loads is taken on to the run's validation (hyperparameter ranges, sizes in
// checked arithmetic), the model config, the parameter table and the FLOP count. Either an
// error comes first, or every size is positive and every count finite: a config that passes
// validation and then yields a negative or non-finite size is a bug (trapped).
#include <cmath>
#include <sstream>

#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/config/config.h"
#include "gemmax/config/run_config.h"
#include "gemmax/config/validate.h"
#include "gemmax/model/params.h"
#include "gemmax/train/flops.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmax;
  const auto parts = fuzz::split_input(fuzz::as_view(data, size), "\n--overrides--\n", 2);
  const std::string file = fuzz::write_scratch("input.yml", parts[0]);
  std::vector<std::string> overrides;
  if (parts.size() > 1) {
    std::istringstream lines{std::string(parts[1])};
    for (std::string line; std::getline(lines, line);) overrides.push_back(line);
  }
  try {
    const Config config = Config::load(file, overrides);
    (void)config.to_yaml();
    (void)Config::from_json(config.to_json(), "round trip");
    validate_run_config(config);
    const ModelConfig model = model_config_from(config);
    const ParamTable table(model);
    const int64_t B = config.get_int("per_device_batch_size"),
                  S = config.get_int("max_target_length");
    const StepFlops f = training_flops(model, B, S);
    if (table.total() <= 0 || table.active() <= 0 || table.active() > table.total() || B <= 0 ||
        S <= 0 || !std::isfinite(f.total()) || !(f.total() > 0) ||
        !(config.get_double("learning_rate") > 0))
      __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
