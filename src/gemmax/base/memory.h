// Memory accounting: every tensor allocation is tagged with what it holds, so a run can print its
// peak memory split by purpose (parameters, gradients, optimizer state, ...).
//
// One tracker counts the process's real allocations (global()); a planning run (model/
// memory_plan.h) counts the allocations of a step that allocates nothing into its own tracker.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
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

// The parts of a step that `gemmax bench` charges whole to one op family, whatever their ops
// (backend/profiling_backend.h): set with the phase, so renaming a phase changes no figure.
enum class StepPart : uint8_t { Layers, OutputHead, Optimizer };

// Current and peak bytes per kind, the peak of the total, and the phase of the step (named by the
// model as it runs) in which each peak was reached.
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

  // The phase that allocations from now on belong to ("forward of layer 3", ...), and the part of
  // the step it is in.
  void set_phase(std::string phase, StepPart part = StepPart::Layers);
  std::string phase() const;
  StepPart part() const { return part_.load(); }
  std::string peak_phase(MemKind kind) const;
  std::string peak_total_phase() const;

 private:
  std::array<std::atomic<size_t>, kNumMemKinds> current_{};
  std::array<std::atomic<size_t>, kNumMemKinds> peak_{};
  std::atomic<size_t> total_{0};
  std::atomic<size_t> peak_total_{0};
  std::atomic<StepPart> part_{StepPart::Layers};
  mutable std::mutex phase_mutex_;  // guards the strings below
  std::string phase_;
  std::array<std::string, kNumMemKinds> peak_phase_;
  std::string peak_total_phase_;
};

// Names what this thread is allocating and the keys that sized it ("the KV cache
// (--max_new_tokens and the prompt)"), so that an allocation failure says so. Scopes nest; the
// innermost names the allocation.
class AllocationScope {
 public:
  explicit AllocationScope(std::string what);
  ~AllocationScope();
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;
};

// "out of host memory allocating N bytes for <scope>": the error of a failed allocation.
[[noreturn]] void fail_out_of_memory(std::string_view memory, size_t bytes);

}  // namespace gemmax
