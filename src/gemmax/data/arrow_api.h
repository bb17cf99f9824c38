// The C interface of libgemmax_arrow.so, the Parquet and Arrow IPC reader (Apache Arrow's C++
// library). The module is built against Arrow's own C++ ABI (the pyarrow wheel's is the old
// std::string one), so nothing but C types crosses it, and no exception: errors come back as text.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// Bumped whenever a struct or a signature below changes.
inline constexpr uint32_t kGemmaxArrowAbi = 1;

enum GemmaxArrowCellKind : int32_t {
  kGemmaxArrowNull = 0,    // a null cell
  kGemmaxArrowString = 1,  // a string cell: its UTF-8 bytes
  kGemmaxArrowJson = 2,    // any other cell of a type JSON can hold (numbers, lists, structs)
  kGemmaxArrowOther = 3,   // a cell JSON cannot hold (binary, dates, ...): data is empty
};

struct GemmaxArrowCell {
  int32_t kind;
  const char* data;  // valid during the callback only
  size_t size;
  const char* type;  // the column's Arrow type, as Arrow prints it ("string", "list<...>")
};

// Called once per row, with one cell per column asked for, in that order. Returns 0 to go on;
// anything else stops the read (which then returns kGemmaxArrowStopped).
typedef int (*GemmaxArrowRowFn)(void* context, const GemmaxArrowCell* cells, size_t num_cells);

enum GemmaxArrowStatus : int32_t {
  kGemmaxArrowOk = 0,
  kGemmaxArrowError = 1,          // `error` says what (a corrupt or unreadable file)
  kGemmaxArrowMissingColumn = 2,  // `error` names the column and the file's columns
  kGemmaxArrowStopped = 3,        // the callback stopped the read
};

enum GemmaxArrowFormat : int32_t {
  kGemmaxArrowParquet = 0,
  kGemmaxArrowIpc = 1,  // an Arrow IPC stream (datasets.save_to_disk) or file (Feather v2)
};

struct GemmaxArrowApi {
  uint32_t abi;                 // kGemmaxArrowAbi
  const char* arrow_version;    // the Arrow library's, e.g. "18.1.0"
  // Streams the rows of `path` (its record batches one at a time), the columns named in
  // `columns`. `error` (of error_size bytes) gets a one-line message on failure.
  int32_t (*read_rows)(const char* path, int32_t format, const char* const* columns,
                       size_t num_columns, GemmaxArrowRowFn fn, void* context, char* error,
                       size_t error_size);
};

// The module's one exported symbol.
const GemmaxArrowApi* gemmax_arrow_api();
typedef const GemmaxArrowApi* (*GemmaxArrowApiFn)();

}  // extern "C"
