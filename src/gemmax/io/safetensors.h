// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON, then the
// tensor data. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the start of the data) and may hold "__metadata__", a string map.
//
// The reader memory-maps the file and checks every number in the header before using it, so a
// damaged or hostile file gives a gemmax::Error naming the file, the tensor and the problem,
// never a crash or a read past the end. Tensors are zero-copy views into the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gemmax/base/named_tensors.h"
#include "gemmax/base/tensor.h"

namespace gemmax {

using StringMap = std::map<std::string, std::string>;

class Progress;

// The data bytes of `tensors`.
uint64_t tensor_bytes(const NamedTensors& tensors);

// One tensor of a safetensors file. `st_dtype` is the dtype as the file spells it ("BF16");
// `supported` is false for safetensors dtypes gemmax has no type for (BOOL, I8, U16, F8_E4M3,
// ...): such entries are listed, and reading them is an error.
struct SafetensorsEntry {
  std::string name;
  std::string st_dtype;
  DType dtype = DType::U8;
  bool supported = true;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section

  uint64_t nbytes() const { return end - begin; }
};

// gemmax dtype <-> safetensors dtype name ("F32", "BF16", ...).
std::string_view safetensors_dtype_name(DType t);

class SafetensorsFile {
 public:
  // Maps and validates the file. Throws gemmax::Error on any problem.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // In data order (ascending offsets).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const StringMap& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws if absent

  // Zero-copy view into the mapping; the view keeps the mapping alive after this object goes.
  // (If the data is not aligned to its element size, which writers that do not pad the header
  // produce, the tensor is copied instead.) Read-only: do not write through it.
  Tensor tensor(const std::string& name) const;
  // An owned copy converted to `dtype` (see convert_dtype).
  Tensor read_as(const std::string& name, DType dtype, MemKind kind = MemKind::Workspace) const;

  uint64_t file_bytes() const;
  // The whole file as mapped when opened: still readable after the file is deleted.
  std::string_view bytes() const;
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> map_;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  StringMap metadata_;
};

// Writes `tensors` (host tensors, names unique) atomically. As the safetensors library does,
// the data is ordered by dtype alignment (largest first), then by name; the header is compact
// JSON with "__metadata__" first (omitted if empty) and is padded with spaces to a multiple of
// 8 bytes, so that every tensor starts aligned to its element size. `progress`, if given,
// counts the data bytes written.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const StringMap& metadata = {}, Progress* progress = nullptr);

// The header bytes (JSON plus padding) that write_safetensors would write, and the order of
// the tensors in the data section. Exposed for the HF writer's size planning and for tests.
std::string safetensors_header(const NamedTensors& tensors, const StringMap& metadata,
                               std::vector<size_t>* data_order);

}  // namespace gemmax
