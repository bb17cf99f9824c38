// Small string helpers: suggesting names, formatting sizes, checking UTF-8.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gemmax {

// "12.34 MiB", "4.56 GiB", "384 B".
std::string format_bytes(double bytes);
// "2.14M", "25.23B", "512".
std::string format_count(double n);

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points above
// U+10FFFF), as JSON and YAML files must be.
bool is_valid_utf8(std::string_view s);

// The entries of a comma-separated list ("a, b,,c" -> a, b, c): each trimmed of spaces and
// tabs, empty ones dropped.
std::vector<std::string> split_list(std::string_view list);

// Levenshtein distance: used to suggest the nearest valid name for a misspelt one.
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `name` ("" if there are none).
std::string nearest(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace gemmax
