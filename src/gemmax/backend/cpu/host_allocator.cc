#include "gemmax/backend/cpu/host_allocator.h"

#include <cstdlib>

#include "gemmax/base/error.h"
#include "gemmax/base/memory.h"

namespace gemmax::cpu {
namespace {

size_t rounded(size_t bytes) { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }

}  // namespace

HostAllocator::~HostAllocator() {
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) std::free(p);
}

void* HostAllocator::allocate(size_t bytes) {
  const size_t size = rounded(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, size);
  if (p == nullptr) {  // give the cache back to the system and try once more
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [s, blocks] : free_)
        for (void* q : blocks) std::free(q);
      free_.clear();
      cached_ = 0;
    }
    p = std::aligned_alloc(64, size);
  }
  if (p == nullptr) fail_out_of_memory("host", bytes);
  return p;
}

void HostAllocator::release(void* allocator, void* ptr, size_t bytes) {
  static_cast<HostAllocator*>(allocator)->give_back(ptr, bytes);
}

void HostAllocator::give_back(void* ptr, size_t bytes) {
  const size_t size = rounded(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  free_[size].push_back(ptr);
  cached_ += size;
}

size_t HostAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

}  // namespace gemmax::cpu
