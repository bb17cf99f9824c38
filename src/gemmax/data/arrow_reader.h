// Rows of Parquet and Arrow IPC files, read by Apache Arrow's C++ library in libgemmax_arrow.so,
// which is loaded on the first read (a build without Arrow says how to get it).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemmax {

enum class ArrowFormat { Parquet, Ipc };

struct ArrowCell {
  enum class Kind { Null, String, Json, Other } kind;
  std::string_view data;  // String: the text; Json: the value as JSON text
  std::string_view type;  // the column's Arrow type ("string", "list<item: struct<...>>")
};

// Calls `row` with one cell per column of `columns`, row by row. Throws gemmax::Error naming the
// file for a missing column (and the columns it has), a corrupt or truncated file, or a build
// without Arrow; an Error thrown by `row` stops the read and is rethrown.
void read_arrow_rows(const std::string& path, ArrowFormat format,
                     const std::vector<std::string>& columns,
                     const std::function<void(std::span<const ArrowCell>)>& row);

// The Arrow version the module was built with, or why it cannot be loaded (for `gemmax info`).
std::string arrow_module_status();

}  // namespace gemmax
