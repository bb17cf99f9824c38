// Small string helpers shared by the config loader and the command-line tools.
#pragma once

#include <string>
#include <vector>

namespace gemmax {

// Levenshtein distance: used to suggest the nearest valid name for a misspelt one.
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `name` ("" if there are none).
std::string nearest(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace gemmax
