// The model presets of configs/models/, compiled into the binary (cmake/embed_configs.cmake).
#pragma once

#include <map>
#include <string>

namespace gemmax {

// Keyed by the path relative to configs/: "models/gemma4-tiny.yml", ...
const std::map<std::string, std::string>& embedded_configs();

}  // namespace gemmax
