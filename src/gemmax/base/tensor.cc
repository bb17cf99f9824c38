#include "gemmax/base/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace gemmax {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))
      fail("a tensor of shape ", shape_str(s),
           " has more elements than 64 bits can count: the sizes that shape it are too large");
  return n;
}

namespace {
// The bytes of a new tensor, checked: a negative dimension is a bug, a product too large for
// 64 bits an input error.
size_t checked_bytes(const Shape& shape, DType dtype) {
  for (int64_t d : shape) GEMMAX_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  int64_t bytes;
  if (__builtin_mul_overflow(shape_numel(shape), int64_t(dtype_size(dtype)), &bytes) ||
      bytes > INT64_MAX - 64)
    fail("a tensor of shape ", shape_str(shape), " in ", dtype_name(dtype),
         " needs more bytes than 64 bits can count: the sizes that shape it are too large");
  return size_t(bytes);
}
}  // namespace

Storage::~Storage() {
  if (!owned) return;
  if (ptr != nullptr) {
    if (release)
      release(allocator, ptr, bytes);
    else
      std::free(ptr);
  }
  if (tracker) tracker->on_free(kind, bytes);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemKind kind, MemoryTracker& tracker) {
  auto st = std::make_shared<Storage>();
  st->bytes = checked_bytes(shape, dtype);
  const size_t padded = (st->bytes + 63) / 64 * 64;
  st->ptr = std::aligned_alloc(64, padded == 0 ? 64 : padded);
  if (st->ptr == nullptr) fail_out_of_memory("host", st->bytes);
  st->kind = kind;
  st->tracker = &tracker;
  tracker.on_alloc(kind, st->bytes);
  return from_storage(std::move(st), shape, dtype);
}

Tensor Tensor::planned(const Shape& shape, DType dtype, MemKind kind, MemoryTracker& tracker) {
  auto st = std::make_shared<Storage>();
  st->bytes = checked_bytes(shape, dtype);
  st->kind = kind;
  st->tracker = &tracker;
  tracker.on_alloc(kind, st->bytes);
  // A plan's sum must stay countable too (each tensor is, but not necessarily their total).
  if (tracker.current_total() > (size_t(1) << 62))
    fail("the memory plan exceeds 4 EiB (at a tensor of shape ", shape_str(shape),
         "): the sizes that shape it are too large");
  return from_storage(std::move(st), shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemKind kind) {
  Tensor t = empty(shape, dtype, kind);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive) {
  auto st = std::make_shared<Storage>();
  st->ptr = data;
  st->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  st->owned = false;
  st->keep_alive = std::move(keep_alive);
  return from_storage(std::move(st), shape, dtype);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  GEMMAX_CHECK(shape_numel(shape) == numel(), "cannot view ", str(), " as ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  GEMMAX_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "rows [", begin, ", ",
               end, ") out of range for ", str());
  Tensor t = *this;
  const int64_t row_elems = numel() / (dim(0) == 0 ? 1 : dim(0));
  t.offset_ += size_t(begin * row_elems) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::flat_slice(int64_t begin, const Shape& shape) const {
  GEMMAX_CHECK(begin >= 0 && begin + shape_numel(shape) <= numel(), "slice at ", begin, " of ",
               shape_str(shape), " out of range for ", str());
  Tensor t = *this;
  t.offset_ += size_t(begin) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

std::string Tensor::str() const { return str_cat(dtype_name(dtype_), shape_str(shape_)); }

double get_as_double(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32:
      return t.data<float>()[i];
    case DType::F64:
      return t.data<double>()[i];
    case DType::BF16:
      return float(t.data<bf16>()[i]);
    case DType::I32:
      return t.data<int32_t>()[i];
    case DType::I64:
      return double(t.data<int64_t>()[i]);
    case DType::U8:
      return t.data<uint8_t>()[i];
    case DType::F16:
      return half_to_float(static_cast<const uint16_t*>(t.raw())[i]);
  }
  return 0;
}

void refuse_nonfinite(const Tensor& t, const std::string& what) {
  const DType d = t.dtype();
  if (d != DType::F32 && d != DType::F64 && d != DType::BF16 && d != DType::F16) return;
  const int64_t n = t.numel();
  int64_t bad = -1;
  if (d == DType::F32) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < n && bad < 0; ++i)
      if (!std::isfinite(p[i])) bad = i;
  } else {
    for (int64_t i = 0; i < n && bad < 0; ++i)
      if (!std::isfinite(get_as_double(t, i))) bad = i;
  }
  if (bad < 0) return;
  Shape at(t.shape().size());
  for (int64_t r = bad, k = int64_t(at.size()) - 1; k >= 0; --k) {
    at[size_t(k)] = t.shape()[size_t(k)] == 0 ? 0 : r % t.shape()[size_t(k)];
    r = t.shape()[size_t(k)] == 0 ? 0 : r / t.shape()[size_t(k)];
  }
  fail(what, ": element ", shape_str(at), " (flat index ", bad, ") is ", get_as_double(t, bad),
       ", not a finite number");
}

void set_from_double(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::F32:
      t.data<float>()[i] = float(v);
      return;
    case DType::F64:
      t.data<double>()[i] = v;
      return;
    case DType::BF16:
      t.data<bf16>()[i] = bf16(v);
      return;
    case DType::I32:
      t.data<int32_t>()[i] = int32_t(v);
      return;
    case DType::I64:
      t.data<int64_t>()[i] = int64_t(v);
      return;
    case DType::U8:
      t.data<uint8_t>()[i] = uint8_t(v);
      return;
    case DType::F16:
      break;
  }
  fail("cannot write ", dtype_name(t.dtype()), " elements");
}

}  // namespace gemmax
