// libgemmax_arrow.so: Parquet and Arrow IPC files read with Apache Arrow's C++ library, row by
// row, behind the C interface of arrow_api.h. It links no gemmax library (it is built with
// Arrow's C++ ABI), and the binary loads it only when a run reads such a file.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>

#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gemmax/data/arrow_api.h"

namespace {

using Json = nlohmann::ordered_json;

struct Failure {
  int32_t status;
  std::string message;
};

void check(const arrow::Status& s, const std::string& what) {
  if (!s.ok()) throw Failure{kGemmaxArrowError, what + ": " + s.ToString()};
}

template <class T>
T value_or_fail(arrow::Result<T> r, const std::string& what) {
  check(r.status(), what);
  return std::move(r).ValueUnsafe();
}

struct NotJson {};  // a value JSON cannot hold

// One value of `a` (row i) as JSON: what `datasets` would give Python for it.
Json to_json(const arrow::Array& a, int64_t i) {
  if (a.IsNull(i)) return nullptr;
  switch (a.type_id()) {
    case arrow::Type::NA: return nullptr;
    case arrow::Type::BOOL: return static_cast<const arrow::BooleanArray&>(a).Value(i);
#define GEMMAX_INT(T, A) \
  case arrow::Type::T: return static_cast<const arrow::A&>(a).Value(i);
      GEMMAX_INT(INT8, Int8Array)
      GEMMAX_INT(INT16, Int16Array)
      GEMMAX_INT(INT32, Int32Array)
      GEMMAX_INT(INT64, Int64Array)
      GEMMAX_INT(UINT8, UInt8Array)
      GEMMAX_INT(UINT16, UInt16Array)
      GEMMAX_INT(UINT32, UInt32Array)
      GEMMAX_INT(UINT64, UInt64Array)
      GEMMAX_INT(FLOAT, FloatArray)
      GEMMAX_INT(DOUBLE, DoubleArray)
#undef GEMMAX_INT
    case arrow::Type::STRING:
      return std::string(static_cast<const arrow::StringArray&>(a).GetView(i));
    case arrow::Type::LARGE_STRING:
      return std::string(static_cast<const arrow::LargeStringArray&>(a).GetView(i));
    case arrow::Type::STRING_VIEW:
      return std::string(static_cast<const arrow::StringViewArray&>(a).GetView(i));
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::FIXED_SIZE_LIST: {
      std::shared_ptr<arrow::Array> items;
      int64_t begin = 0, end = 0;
      if (a.type_id() == arrow::Type::LIST) {
        const auto& l = static_cast<const arrow::ListArray&>(a);
        begin = l.value_offset(i), end = begin + l.value_length(i), items = l.values();
      } else if (a.type_id() == arrow::Type::LARGE_LIST) {
        const auto& l = static_cast<const arrow::LargeListArray&>(a);
        begin = l.value_offset(i), end = begin + l.value_length(i), items = l.values();
      } else {
        const auto& l = static_cast<const arrow::FixedSizeListArray&>(a);
        begin = l.value_offset(i), end = begin + l.value_length(i), items = l.values();
      }
      Json out = Json::array();
      for (int64_t k = begin; k < end; ++k) out.push_back(to_json(*items, k));
      return out;
    }
    case arrow::Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(a);
      Json out = Json::object();
      for (int f = 0; f < s.num_fields(); ++f)
        out[s.struct_type()->field(f)->name()] = to_json(*s.field(f), i);
      return out;
    }
    default: throw NotJson{};
  }
}

bool is_text(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING ||
         t.id() == arrow::Type::STRING_VIEW;
}

std::string_view string_at(const arrow::Array& a, int64_t i) {
  switch (a.type_id()) {
    case arrow::Type::STRING: return static_cast<const arrow::StringArray&>(a).GetView(i);
    case arrow::Type::LARGE_STRING:
      return static_cast<const arrow::LargeStringArray&>(a).GetView(i);
    default: return static_cast<const arrow::StringViewArray&>(a).GetView(i);
  }
}

std::string column_list(const arrow::Schema& schema) {
  std::string s;
  for (const auto& f : schema.fields()) s += (s.empty() ? "" : ", ") + f->name();
  return s.empty() ? "none" : s;
}

// The fields of `schema` named in `columns`, in that order, or a missing-column failure.
std::vector<int> field_indices(const arrow::Schema& schema, const std::vector<std::string>& columns) {
  std::vector<int> out;
  for (const std::string& c : columns) {
    const int at = schema.GetFieldIndex(c);
    if (at < 0)
      throw Failure{kGemmaxArrowMissingColumn,
                    "has no column \"" + c + "\" (its columns: " + column_list(schema) + ")"};
    out.push_back(at);
  }
  return out;
}

// Calls fn for each row of each batch the reader yields; batch columns are in `columns` order.
void stream(arrow::RecordBatchReader& reader, size_t num_columns, GemmaxArrowRowFn fn,
            void* context) {
  std::vector<GemmaxArrowCell> cells(num_columns);
  std::vector<std::string> types(num_columns), json(num_columns);
  for (;;) {
    std::shared_ptr<arrow::RecordBatch> batch;
    check(reader.ReadNext(&batch), "reading a record batch");
    if (!batch) return;
    for (size_t c = 0; c < num_columns; ++c) types[c] = batch->column(int(c))->type()->ToString();
    for (int64_t row = 0; row < batch->num_rows(); ++row) {
      for (size_t c = 0; c < num_columns; ++c) {
        const arrow::Array& a = *batch->column(int(c));
        GemmaxArrowCell& cell = cells[c];
        cell = {kGemmaxArrowNull, "", 0, types[c].c_str()};
        if (a.IsNull(row)) continue;
        if (is_text(*a.type())) {
          const std::string_view v = string_at(a, row);
          cell.kind = kGemmaxArrowString, cell.data = v.data(), cell.size = v.size();
          continue;
        }
        try {
          json[c] = to_json(a, row).dump(-1, ' ', false, Json::error_handler_t::replace);
          cell.kind = kGemmaxArrowJson, cell.data = json[c].data(), cell.size = json[c].size();
        } catch (const NotJson&) {
          cell.kind = kGemmaxArrowOther;
        }
      }
      if (fn(context, cells.data(), cells.size()) != 0)
        throw Failure{kGemmaxArrowStopped, "stopped"};
    }
  }
}

void read_parquet(const std::string& path, const std::vector<std::string>& columns,
                  GemmaxArrowRowFn fn, void* context) {
  auto file = value_or_fail(arrow::io::ReadableFile::Open(path), "cannot open");
  std::unique_ptr<parquet::arrow::FileReader> reader;
  check(parquet::arrow::OpenFile(file, arrow::default_memory_pool(), &reader),
        "not a readable Parquet file");
  std::shared_ptr<arrow::Schema> schema;
  check(reader->GetSchema(&schema), "reading the Parquet schema");
  const std::vector<int> fields = field_indices(*schema, columns);
  // Parquet reads leaf columns: those under each field asked for (a list of structs has several).
  std::vector<int> leaves;
  const auto& manifest = reader->manifest();
  auto add_leaves = [&](auto&& self, const parquet::arrow::SchemaField& f) -> void {
    if (f.is_leaf()) leaves.push_back(f.column_index);
    for (const auto& child : f.children) self(self, child);
  };
  for (int f : fields) add_leaves(add_leaves, manifest.schema_fields[size_t(f)]);
  std::vector<int> row_groups(size_t(reader->num_row_groups()));
  for (size_t g = 0; g < row_groups.size(); ++g) row_groups[g] = int(g);
  std::unique_ptr<arrow::RecordBatchReader> batches;
  check(reader->GetRecordBatchReader(row_groups, leaves, &batches), "reading the row groups");
  // The batches' fields follow the file's order; put them in the order asked for.
  struct Ordered final : arrow::RecordBatchReader {
    std::unique_ptr<arrow::RecordBatchReader> in;
    std::vector<std::string> names;
    std::shared_ptr<arrow::Schema> schema() const override { return in->schema(); }
    arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* out) override {
      std::shared_ptr<arrow::RecordBatch> b;
      ARROW_RETURN_NOT_OK(in->ReadNext(&b));
      if (!b) return *out = nullptr, arrow::Status::OK();
      std::vector<int> at;
      for (const std::string& n : names) at.push_back(b->schema()->GetFieldIndex(n));
      ARROW_ASSIGN_OR_RAISE(*out, b->SelectColumns(at));
      return arrow::Status::OK();
    }
  } ordered;
  ordered.in = std::move(batches);
  ordered.names = columns;
  stream(ordered, columns.size(), fn, context);
}

void read_ipc(const std::string& path, const std::vector<std::string>& columns,
              GemmaxArrowRowFn fn, void* context) {
  auto file = value_or_fail(arrow::io::ReadableFile::Open(path), "cannot open");
  char magic[6] = {};
  const int64_t got = value_or_fail(file->ReadAt(0, 6, magic), "reading");
  struct Selected final : arrow::RecordBatchReader {
    std::function<arrow::Status(std::shared_ptr<arrow::RecordBatch>*)> next;
    std::shared_ptr<arrow::Schema> full;
    std::vector<int> at;
    std::shared_ptr<arrow::Schema> schema() const override { return full; }
    arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* out) override {
      std::shared_ptr<arrow::RecordBatch> b;
      ARROW_RETURN_NOT_OK(next(&b));
      if (!b) return *out = nullptr, arrow::Status::OK();
      ARROW_ASSIGN_OR_RAISE(*out, b->SelectColumns(at));
      return arrow::Status::OK();
    }
  } selected;
  if (got == 6 && std::memcmp(magic, "ARROW1", 6) == 0) {  // the IPC file format
    auto reader = value_or_fail(arrow::ipc::RecordBatchFileReader::Open(file),
                                "not a readable Arrow IPC file");
    selected.full = reader->schema();
    selected.at = field_indices(*selected.full, columns);
    int next = 0;
    selected.next = [reader, next](std::shared_ptr<arrow::RecordBatch>* b) mutable {
      if (next >= reader->num_record_batches()) return *b = nullptr, arrow::Status::OK();
      ARROW_ASSIGN_OR_RAISE(*b, reader->ReadRecordBatch(next++));
      return arrow::Status::OK();
    };
  } else {  // the IPC stream format, which datasets.save_to_disk writes
    check(file->Seek(0), "seeking");
    std::shared_ptr<arrow::ipc::RecordBatchStreamReader> reader = value_or_fail(
        arrow::ipc::RecordBatchStreamReader::Open(file), "not a readable Arrow IPC stream");
    selected.full = reader->schema();
    selected.at = field_indices(*selected.full, columns);
    selected.next = [reader](std::shared_ptr<arrow::RecordBatch>* b) { return reader->ReadNext(b); };
  }
  stream(selected, columns.size(), fn, context);
}

int32_t read_rows(const char* path, int32_t format, const char* const* columns,
                  size_t num_columns, GemmaxArrowRowFn fn, void* context, char* error,
                  size_t error_size) {
  std::string message;
  int32_t status = kGemmaxArrowOk;
  try {
    const std::vector<std::string> names(columns, columns + num_columns);
    if (format == kGemmaxArrowParquet) read_parquet(path, names, fn, context);
    else read_ipc(path, names, fn, context);
  } catch (const Failure& f) {
    status = f.status, message = f.message;
  } catch (const parquet::ParquetException& e) {
    status = kGemmaxArrowError, message = std::string("not a readable Parquet file: ") + e.what();
  } catch (const std::exception& e) {
    status = kGemmaxArrowError, message = e.what();
  } catch (...) {
    status = kGemmaxArrowError, message = "unknown error";
  }
  if (status != kGemmaxArrowOk && error && error_size) {
    std::strncpy(error, message.c_str(), error_size - 1);
    error[error_size - 1] = '\0';
  }
  return status;
}

const GemmaxArrowApi kApi = {kGemmaxArrowAbi, ARROW_VERSION_STRING, read_rows};

}  // namespace

extern "C" __attribute__((visibility("default"))) const GemmaxArrowApi* gemmax_arrow_api() {
  return &kApi;
}
