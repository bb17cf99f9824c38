// The cpu backend's memory: 64-byte aligned host blocks, cached by size.
//
// A training step allocates and frees the same tensors every step. Freshly mapped memory costs
// a page fault per 4 KiB on first touch (the kernel zeroes it), which for gemma4-small's step
// is gigabytes of zeroing; this cache hands a freed block of the same size back instead. The
// MemoryTracker still counts tensors (what is live), so plans and measured peaks are unchanged;
// the blocks the cache holds are reported apart (cached_bytes).
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gemmax::cpu {

class HostAllocator {
 public:
  HostAllocator() = default;
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;
  ~HostAllocator();

  void* allocate(size_t bytes);  // throws gemmax::Error when out of memory
  // The Storage release hook: back into the cache.
  static void release(void* allocator, void* ptr, size_t bytes);
  size_t cached_bytes() const;

 private:
  void give_back(void* ptr, size_t bytes);

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // by rounded size
  size_t cached_ = 0;
};

}  // namespace gemmax::cpu
