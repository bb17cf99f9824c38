// Tensor: a typed, shaped, contiguous view of a reference-counted buffer.
//
// Tensors are cheap handles (copying one shares the buffer). Views made by `view` and `rows`
// share the buffer too. Ownership is plain: the buffer is freed when its last handle goes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gemmax/base/dtype.h"
#include "gemmax/base/error.h"
#include "gemmax/base/memory.h"

namespace gemmax {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);

enum class Device : uint8_t { Host, Cuda };

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::F64;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::I32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::I64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::U8;
}

// A block of memory and the accounting of it. `owned == false` wraps foreign memory (e.g. a
// memory-mapped file) that the Storage never frees and does not count. A planned storage (ptr ==
// nullptr, tracker set) holds no memory: it counts the bytes a planning run would allocate
// (train/memory_plan.h).
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device = Device::Host;
  MemKind kind = MemKind::Workspace;
  bool owned = true;
  MemoryTracker* tracker = nullptr;  // where the bytes are counted (owned storage)
  std::shared_ptr<void> keep_alive;  // for wrapped memory: whatever owns it
  // Gives the memory back to the allocator of the backend that made it (null: std::free).
  void (*release)(void* allocator, void* ptr, size_t bytes) = nullptr;
  void* allocator = nullptr;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;

  // Host allocations, counted in `tracker`. `empty` leaves the contents undefined.
  static Tensor empty(const Shape& shape, DType dtype, MemKind kind = MemKind::Workspace,
                      MemoryTracker& tracker = MemoryTracker::global());
  static Tensor zeros(const Shape& shape, DType dtype, MemKind kind = MemKind::Workspace);
  // A tensor with no memory whose bytes are counted in `tracker` (planning runs).
  static Tensor planned(const Shape& shape, DType dtype, MemKind kind, MemoryTracker& tracker);
  // Wraps memory owned elsewhere; `keep_alive` (may be null) is held as long as the tensor.
  static Tensor wrap(void* data, const Shape& shape, DType dtype,
                     std::shared_ptr<void> keep_alive = nullptr);
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return int(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  Device device() const { return storage_ ? storage_->device : Device::Host; }
  MemKind mem_kind() const { return storage_ ? storage_->kind : MemKind::Workspace; }
  bool shares_storage(const Tensor& o) const { return storage_ == o.storage_; }

  void* raw() const {
    GEMMAX_CHECK(storage_->ptr != nullptr || storage_->bytes == 0, "tensor ", str(),
                 " has no memory (a planning run reads no data)");
    return static_cast<char*>(storage_->ptr) + offset_;
  }
  template <class T>
  T* data() const {
    GEMMAX_CHECK(dtype_ == dtype_of<T>(), "tensor of ", dtype_name(dtype_), " read as ",
                 dtype_name(dtype_of<T>()));
    // A host pointer into GPU memory would segfault far from here.
    GEMMAX_CHECK(device() == Device::Host, "tensor ", str(),
                 " is in GPU memory: read it on the host through Backend::to_host");
    return static_cast<T*>(raw());
  }

  // Same elements, another shape (numel must match).
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) along dimension 0.
  Tensor rows(int64_t begin, int64_t end) const;
  // Elements [begin, begin + count) of the flattened tensor, with the given shape.
  Tensor flat_slice(int64_t begin, const Shape& shape) const;

  std::string str() const;  // "float32[2, 3]"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  DType dtype_ = DType::F32;
  Shape shape_;
};

// Element access in double, for tests and small host-side computations.
double get_as_double(const Tensor& t, int64_t i);
// Throws gemmax::Error when a floating-point tensor holds a NaN or an infinity: "<what>: element
// [i, j, ...] (flat index n) is nan". Integer tensors pass.
void refuse_nonfinite(const Tensor& t, const std::string& what);
void set_from_double(const Tensor& t, int64_t i, double v);

}  // namespace gemmax
