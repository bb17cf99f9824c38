// Memory accounting: every tensor allocation is tagged with what it holds, so a run can print
// its peak memory split by purpose (parameters, gradients, optimizer state, ...).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <string_view>

namespace gemmax {

enum class MemKind : uint8_t {
  Params,       // fp32 master weights
  Grads,        // fp32 gradients
  OptState,     // Adam moments
  Activations,  // tensors saved by the forward for the backward
  Workspace,    // transients of one op or one layer
  Data,         // batches, tokens
  kCount
};
std::string_view mem_kind_name(MemKind k);
constexpr size_t kNumMemKinds = size_t(MemKind::kCount);

// Process-wide current and peak bytes per kind, and the peak of the total.
class MemoryTracker {
 public:
  static MemoryTracker& global();

  void on_alloc(MemKind kind, size_t bytes);
  void on_free(MemKind kind, size_t bytes);

  size_t current(MemKind kind) const { return current_[size_t(kind)].load(); }
  size_t peak(MemKind kind) const { return peak_[size_t(kind)].load(); }
  size_t current_total() const { return total_.load(); }
  size_t peak_total() const { return peak_total_.load(); }
  // Starts a new measurement window: peaks restart from the current values.
  void reset_peaks();

 private:
  std::array<std::atomic<size_t>, kNumMemKinds> current_{};
  std::array<std::atomic<size_t>, kNumMemKinds> peak_{};
  std::atomic<size_t> total_{0};
  std::atomic<size_t> peak_total_{0};
};

}  // namespace gemmax
