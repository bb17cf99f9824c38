// A list of named tensors in a chosen order: what a checkpoint, an export or an optimizer's state
// hands to a file writer. A plain vector keeps the order the writer must reproduce.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gemmax/base/tensor.h"

namespace gemmax {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

}  // namespace gemmax
