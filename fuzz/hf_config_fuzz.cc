// The Hugging Face config.json reader (text-only and multimodal forms): any bytes, then the
// model it describes through the parameter table and back to config.json.
#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmax;
  try {
    const ModelConfig model = parse_hf_config(fuzz::as_view(data, size), "config.json");
    const ParamTable table(model);
    (void)(table.total() + table.active());
    (void)hf_config_json(model, DType::BF16);
  } catch (const Error&) {
  }
  return 0;
}
