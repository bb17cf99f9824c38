// Typed views of a Config for the parts of a run.
#pragma once

#include "gemmax/config/config.h"
#include "gemmax/config/model_config.h"

namespace gemmax {

// The model keys of `config` (filled from the preset unless overridden). Validated.
ModelConfig model_config_from(const Config& config);
// The model's dimensions as MaxText's keys: "base_num_decoder_layers=30 base_emb_dim=2816 ...".
std::string maxtext_model_keys(const ModelConfig& m);

}  // namespace gemmax
