// The YAML config with key=value overrides, as `gemmax train FILE.yml key=value ...` reads them:
// the input is the YAML file, then (after a "\n--overrides--\n" line) one override per line.
// A config that loads is taken on to the model config, the parameter table and the memory plan,
// which must refuse what they cannot represent.
#include <sstream>

#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/config/config.h"
#include "gemmax/config/run_config.h"
#include "gemmax/model/params.h"

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
    const ModelConfig model = model_config_from(config);
    const ParamTable table(model);
    (void)(table.total() + table.active());
  } catch (const Error&) {
  }
  return 0;
}
