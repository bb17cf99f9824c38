// A Hugging Face model folder's generation_config.json: the ids generation stops at and the
// sampling defaults, read as transformers' GenerationConfig reads them (a field the file leaves
// out takes transformers' default: do_sample false, temperature 1, top_k 50, top_p 1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gemmax {

struct HfGenerationConfig {
  std::vector<int32_t> eos_ids;  // eos_token_id: one id or a list; empty when the file has none
  bool do_sample = false;        // false: greedy, whatever the sampling fields say
  double temperature = 1.0;
  int64_t top_k = 50;
  double top_p = 1.0;
};

// The file DIR/generation_config.json, or nullopt when DIR has none. Throws gemmax::Error naming
// the file and the field for a file that is not JSON or a field of the wrong type.
std::optional<HfGenerationConfig> read_generation_config(const std::string& dir);
HfGenerationConfig parse_generation_config(const std::string& text, const std::string& where);

}  // namespace gemmax
