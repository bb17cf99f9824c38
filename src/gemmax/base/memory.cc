#include "gemmax/base/memory.h"

#include <vector>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"

namespace gemmax {

std::string_view mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::Params:
      return "parameters";
    case MemKind::Grads:
      return "gradients";
    case MemKind::OptState:
      return "optimizer";
    case MemKind::Activations:
      return "activations";
    case MemKind::Workspace:
      return "workspace";
    case MemKind::Data:
      return "data";
    case MemKind::kCount:
      break;
  }
  return "?";
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker tracker;
  return tracker;
}

// Raises `peak` to `value`; true if this call raised it.
static bool raise_to(std::atomic<size_t>& peak, size_t value) {
  size_t seen = peak.load();
  while (value > seen)
    if (peak.compare_exchange_weak(seen, value)) return true;
  return false;
}

void MemoryTracker::on_alloc(MemKind kind, size_t bytes) {
  const size_t k = size_t(kind);
  const bool kind_peak = raise_to(peak_[k], current_[k].fetch_add(bytes) + bytes);
  const bool total_peak = raise_to(peak_total_, total_.fetch_add(bytes) + bytes);
  if (!kind_peak && !total_peak) return;
  std::lock_guard<std::mutex> lock(phase_mutex_);
  if (kind_peak) peak_phase_[k] = phase_;
  if (total_peak) peak_total_phase_ = phase_;
}

void MemoryTracker::on_free(MemKind kind, size_t bytes) {
  current_[size_t(kind)].fetch_sub(bytes);
  total_.fetch_sub(bytes);
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(phase_mutex_);
  for (size_t k = 0; k < kNumMemKinds; ++k) {
    peak_[k].store(current_[k].load());
    peak_phase_[k] = phase_;
  }
  peak_total_.store(total_.load());
  peak_total_phase_ = phase_;
}

void MemoryTracker::set_phase(std::string phase, StepPart part) {
  std::lock_guard<std::mutex> lock(phase_mutex_);
  phase_ = std::move(phase);
  part_ = part;
}

std::string MemoryTracker::phase() const {
  std::lock_guard<std::mutex> lock(phase_mutex_);
  return phase_;
}

std::string MemoryTracker::peak_phase(MemKind kind) const {
  std::lock_guard<std::mutex> lock(phase_mutex_);
  return peak_phase_[size_t(kind)];
}

std::string MemoryTracker::peak_total_phase() const {
  std::lock_guard<std::mutex> lock(phase_mutex_);
  return peak_total_phase_;
}

namespace {
thread_local std::vector<std::string> t_allocation_scopes;
}

AllocationScope::AllocationScope(std::string what) {
  t_allocation_scopes.push_back(std::move(what));
}

AllocationScope::~AllocationScope() { t_allocation_scopes.pop_back(); }

void fail_out_of_memory(std::string_view memory, size_t bytes) {
  fail("out of ", memory, " memory allocating ", format_bytes(double(bytes)), " (", bytes,
       " bytes)",
       t_allocation_scopes.empty() ? std::string(" (the sizes come from the model and run keys)")
                                   : " for " + t_allocation_scopes.back(),
       "; lower the keys named, or run on a machine with more memory");
}

}  // namespace gemmax
