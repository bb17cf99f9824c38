#include "gemmax/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "gemmax/base/convert.h"
#include "gemmax/base/progress.h"
#include "gemmax/io/atomic_file.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; gemmax reads it in place");

namespace gemmax {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the safetensors library's limit

struct StDType {
  const char* name;
  uint32_t size;
  bool supported;
  DType dtype;
};

// Every byte-sized safetensors dtype. Those gemmax has no type for are listed (so that their
// byte ranges can still be checked) but cannot be read.
constexpr StDType kStDTypes[] = {
    {"F32", 4, true, DType::F32},     {"F64", 8, true, DType::F64},
    {"BF16", 2, true, DType::BF16},   {"F16", 2, true, DType::F16},
    {"I32", 4, true, DType::I32},     {"I64", 8, true, DType::I64},
    {"U8", 1, true, DType::U8},       {"BOOL", 1, false, DType::U8},
    {"I8", 1, false, DType::U8},      {"I16", 2, false, DType::U8},
    {"U16", 2, false, DType::U8},     {"U32", 4, false, DType::U8},
    {"U64", 8, false, DType::U8},     {"F8_E5M2", 1, false, DType::U8},
    {"F8_E4M3", 1, false, DType::U8}, {"F8_E8M0", 1, false, DType::U8},
    {"C64", 8, false, DType::U8},
};

const StDType* find_st_dtype(std::string_view name) {
  for (const StDType& d : kStDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

// The safetensors library's dtype order (increasing alignment); it writes larger first.
int alignment_rank(DType t) {
  switch (t) {
    case DType::U8: return 1;
    case DType::F16: return 7;
    case DType::BF16: return 8;
    case DType::I32: return 9;
    case DType::F32: return 11;
    case DType::F64: return 12;
    case DType::I64: return 13;
  }
  return 0;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses JSON, rejecting duplicate keys (nlohmann would silently keep the last one, letting a
// header say two different things about one tensor).
nlohmann::json parse_json_strict(std::string_view text, const std::string& what) {
  std::vector<std::set<std::string>> seen;
  auto cb = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& j) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start)
      seen.emplace_back();
    else if (ev == E::object_end)
      seen.pop_back();
    else if (ev == E::key && !seen.back().insert(j.get<std::string>()).second)
      fail(what, ": duplicate key \"", j.get<std::string>(), "\" in the JSON header");
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    fail(what, ": the header is not valid JSON: ", e.what());
  }
}

std::string json_snippet(const nlohmann::json& j) {
  std::string s = j.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  for (const StDType& d : kStDTypes)
    if (d.supported && d.dtype == t) return d.name;
  return "?";
}

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t len = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, len);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open safetensors file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat '", path, "': ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'", path, "' is not a regular file");
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail("'", path, "' is ", size, " bytes, too short for a safetensors file (it starts with an ",
         "8-byte header length); the file is truncated or not safetensors");
  }
  f.map_ = std::make_shared<Mapping>();
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping stays valid
  if (addr == MAP_FAILED) fail("cannot memory-map '", path, "': ", std::strerror(map_err));
  f.map_->addr = addr;
  f.map_->len = size;
  const auto* base = static_cast<const unsigned char*>(addr);

  const uint64_t n = read_le64(base);
  if (n > size - 8)
    fail("'", path, "': header length ", n, " runs past the end of the file (", size - 8,
         " bytes follow the length field); the file is truncated or not safetensors");
  if (n > kMaxHeaderBytes)
    fail("'", path, "': header length ", n, " exceeds the safetensors limit of ", kMaxHeaderBytes);
  f.data_offset_ = 8 + n;
  const uint64_t data_size = size - f.data_offset_;
  const std::string_view text(reinterpret_cast<const char*>(base + 8), size_t(n));
  const nlohmann::json header = parse_json_strict(text, "'" + path + "'");
  if (!header.is_object())
    fail("'", path, "': the header must be a JSON object, got ", json_snippet(header));

  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail("'", path, "': __metadata__ must be an object of strings");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          fail("'", path, "': __metadata__[\"", k, "\"] must be a string, got ", json_snippet(v));
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "'" + path + "': tensor '" + name + "'";
    if (!value.is_object()) fail(where, ": entry must be an object, got ", json_snippet(value));
    for (const auto& [k, v] : value.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        fail(where, ": unexpected key \"", k, "\" (expected dtype, shape, data_offsets)");
    for (const char* k : {"dtype", "shape", "data_offsets"})
      if (!value.contains(k)) fail(where, ": missing \"", k, "\"");

    SafetensorsEntry e;
    e.name = name;
    const nlohmann::json& jd = value["dtype"];
    if (!jd.is_string()) fail(where, ": dtype must be a string, got ", json_snippet(jd));
    e.st_dtype = jd.get<std::string>();
    const StDType* sd = find_st_dtype(e.st_dtype);
    if (sd == nullptr)
      fail(where, ": unknown dtype \"", e.st_dtype,
           "\" (gemmax reads F32, F64, BF16, F16, I32, I64, U8)");
    e.dtype = sd->dtype;
    e.supported = sd->supported;

    const nlohmann::json& js = value["shape"];
    if (!js.is_array()) fail(where, ": shape must be an array, got ", json_snippet(js));
    uint64_t numel = 1;
    for (const nlohmann::json& d : js) {
      if (!d.is_number_unsigned())  // nlohmann stores non-negative integers as unsigned
        fail(where, ": shape ", json_snippet(js), " must hold non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > uint64_t(INT64_MAX) || !checked_mul(numel, dim, &numel))
        fail(where, ": shape ", json_snippet(js), " overflows");
      e.shape.push_back(int64_t(dim));
    }
    uint64_t need = 0;
    if (!checked_mul(numel, sd->size, &need) || need > uint64_t(INT64_MAX))
      fail(where, ": shape ", json_snippet(js), " overflows");

    const nlohmann::json& jo = value["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() ||
        !jo[1].is_number_unsigned())
      fail(where, ": data_offsets must be [begin, end] with non-negative integers, got ",
           json_snippet(jo));
    e.begin = jo[0].get<uint64_t>();
    e.end = jo[1].get<uint64_t>();
    if (e.begin > e.end) fail(where, ": data_offsets [", e.begin, ", ", e.end, "] has begin > end");
    if (e.end > data_size)
      fail(where, ": data_offsets [", e.begin, ", ", e.end, "] end past the data section (",
           data_size, " bytes); the file is truncated or the header is wrong");
    if (e.end - e.begin != need)
      fail(where, ": data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin,
           " bytes but ", e.st_dtype, shape_str(e.shape), " needs ", need, " bytes");
    f.entries_.push_back(std::move(e));
  }

  // Data order, and no two tensors may share bytes (empty tensors occupy none).
  std::sort(f.entries_.begin(), f.entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.name < b.name;
  });
  const SafetensorsEntry* last = nullptr;
  for (const SafetensorsEntry& e : f.entries_) {
    if (e.nbytes() == 0) continue;
    if (last != nullptr && e.begin < last->end)
      fail("'", path, "': tensor '", e.name, "' at [", e.begin, ", ", e.end, ") overlaps tensor '",
           last->name, "' at [", last->begin, ", ", last->end, "); the header is corrupt");
    if (last == nullptr || e.end > last->end) last = &e;
  }
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_[f.entries_[i].name] = i;
  return f;
}

uint64_t SafetensorsFile::file_bytes() const { return map_ ? map_->len : 0; }
std::string_view SafetensorsFile::bytes() const {
  return map_ ? std::string_view(static_cast<const char*>(map_->addr), map_->len) : std::string_view();
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("'", path_, "' has no tensor named '", name, "'");
  return entries_[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  if (!e.supported)
    fail("'", path_, "': tensor '", name, "' has dtype ", e.st_dtype,
         ", which gemmax cannot read (it reads F32, F64, BF16, F16, I32, I64, U8)");
  char* p = static_cast<char*>(map_->addr) + data_offset_ + e.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) != 0) {  // unpadded header
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.nbytes() > 0) std::memcpy(t.raw(), p, e.nbytes());
    return t;
  }
  return Tensor::wrap(p, e.shape, e.dtype, std::shared_ptr<void>(map_));
}

Tensor SafetensorsFile::read_as(const std::string& name, DType dtype, MemKind kind) const {
  const Tensor t = tensor(name);
  try {
    return convert_dtype(t, dtype, kind);
  } catch (const Error& err) {
    fail("'", path_, "': tensor '", name, "': ", err.what());
  }
}

std::string safetensors_header(const NamedTensors& tensors, const StringMap& metadata,
                               std::vector<size_t>* data_order) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = alignment_rank(tensors[a].second.dtype());
    const int rb = alignment_rank(tensors[b].second.dtype());
    return ra != rb ? ra > rb : tensors[a].first < tensors[b].first;
  });
  std::set<std::string> names;
  for (const auto& [name, t] : tensors)
    if (!names.insert(name).second)
      fail("write_safetensors: tensor name '", name, "' appears twice");

  // ordered_json keeps insertion order: "__metadata__" first, then the data order, and the
  // fields of each entry in the library's order (dtype, shape, data_offsets).
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    if (name == "__metadata__") fail("write_safetensors: '__metadata__' cannot name a tensor");
    if (!t.defined()) fail("write_safetensors: tensor '", name, "' is undefined");
    if (t.device() != Device::Host)
      fail("write_safetensors: tensor '", name, "' is not in host memory; copy it to host first");
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = std::string(safetensors_dtype_name(t.dtype()));
    e["shape"] = t.shape();
    e["data_offsets"] = {offset, offset + t.nbytes()};
    offset += t.nbytes();
    h[name] = std::move(e);
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("write_safetensors: cannot encode the header (are all names valid UTF-8?): ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  if (data_order != nullptr) *data_order = std::move(order);
  return text;
}

uint64_t tensor_bytes(const NamedTensors& tensors) {
  uint64_t n = 0;
  for (const auto& [name, t] : tensors) n += t.defined() ? t.nbytes() : 0;
  return n;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const StringMap& metadata, Progress* progress) {
  std::vector<size_t> order;
  const std::string header = safetensors_header(tensors, metadata, &order);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  AtomicFile f(path);
  f.write(len, 8);
  f.write(header);
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    if (t.nbytes() > 0) f.write(t.raw(), t.nbytes());
    if (progress) progress->add(double(t.nbytes()));
  }
  f.commit();
}

}  // namespace gemmax
