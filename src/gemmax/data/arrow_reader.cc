#include "gemmax/data/arrow_reader.h"

#include <exception>
#include <mutex>

#include "gemmax/base/error.h"
#include "gemmax/base/shared_module.h"
#include "gemmax/data/arrow_api.h"

#ifndef GEMMAX_ARROW_MODULE_BUILT
#define GEMMAX_ARROW_MODULE_BUILT 0
#endif

namespace gemmax {
namespace {

struct Loaded {
  const GemmaxArrowApi* api = nullptr;
  std::string error;  // why api is null
};

const Loaded& arrow_module() {
  static const Loaded loaded = [] {
    Loaded l;
    if (!GEMMAX_ARROW_MODULE_BUILT) {
      l.error =
          "this gemmax was built without Apache Arrow's C++ library, which reads Parquet and "
          "Arrow files: configure with -DGEMMAX_ARROW=ON (it fetches the pinned pyarrow wheel's "
          "libraries) or -DGEMMAX_ARROW_ROOT=<an installed Arrow C++>, or give the data as "
          "JSON/JSONL";
      return l;
    }
    const SharedModule m =
        open_shared_module("libgemmax_arrow.so", "GEMMAX_ARROW_MODULE", "Apache Arrow's libarrow and libparquet (lib/ beside bin/)");
    if (!m.handle) {
      l.error = str_cat("its Parquet/Arrow reader cannot be loaded: ", m.error,
                        " (GEMMAX_ARROW_MODULE names another copy)");
      return l;
    }
    auto fn = reinterpret_cast<GemmaxArrowApiFn>(module_symbol(m, "gemmax_arrow_api"));
    const GemmaxArrowApi* api = fn ? fn() : nullptr;
    if (!api || api->abi != kGemmaxArrowAbi) {
      l.error = str_cat(m.path, " is not the Parquet/Arrow reader of this gemmax (interface ",
                        api ? int64_t(api->abi) : -1, ", expected ", kGemmaxArrowAbi,
                        "): use the one built with this gemmax");
      return l;
    }
    l.api = api;
    return l;
  }();
  return loaded;
}

struct Context {
  const std::function<void(std::span<const ArrowCell>)>* row;
  std::vector<ArrowCell> cells;
  std::exception_ptr thrown;
};

int on_row(void* context, const GemmaxArrowCell* cells, size_t n) {
  auto& c = *static_cast<Context*>(context);
  c.cells.resize(n);
  for (size_t i = 0; i < n; ++i)
    c.cells[i] = {ArrowCell::Kind(cells[i].kind), {cells[i].data, cells[i].size}, cells[i].type};
  try {
    (*c.row)(c.cells);
    return 0;
  } catch (...) {  // no exception may cross into the module
    c.thrown = std::current_exception();
    return 1;
  }
}

}  // namespace

void read_arrow_rows(const std::string& path, ArrowFormat format,
                     const std::vector<std::string>& columns,
                     const std::function<void(std::span<const ArrowCell>)>& row) {
  const char* kind = format == ArrowFormat::Parquet ? "Parquet" : "Arrow";
  const Loaded& m = arrow_module();
  if (!m.api) fail("cannot read the ", kind, " file '", path, "': ", m.error);
  std::vector<const char*> names;
  for (const std::string& c : columns) names.push_back(c.c_str());
  Context c{&row, {}, nullptr};
  char error[2048] = {};
  const int32_t status = m.api->read_rows(
      path.c_str(), format == ArrowFormat::Parquet ? kGemmaxArrowParquet : kGemmaxArrowIpc,
      names.data(), names.size(), on_row, &c, error, sizeof error);
  if (c.thrown) std::rethrow_exception(c.thrown);
  if (status == kGemmaxArrowMissingColumn)
    fail(kind, " file '", path, "' ", error,
         ": name its columns in train_data_columns/eval_data_columns (gemmax tokenize: "
         "--data_columns)");
  if (status != kGemmaxArrowOk)
    fail(kind, " file '", path, "': ", error,
         format == ArrowFormat::Parquet
             ? "; the file is truncated or not Parquet: download it again (or remove it)"
             : "; the file is truncated or not an Arrow IPC file: save the dataset again");
}

std::string arrow_module_status() {
  const Loaded& m = arrow_module();
  return m.api ? str_cat("Apache Arrow ", m.api->arrow_version) : m.error;
}

}  // namespace gemmax
