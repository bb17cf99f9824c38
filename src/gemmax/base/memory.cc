#include "gemmax/base/memory.h"

namespace gemmax {

std::string_view mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::Params: return "parameters";
    case MemKind::Grads: return "gradients";
    case MemKind::OptState: return "optimizer";
    case MemKind::Activations: return "activations";
    case MemKind::Workspace: return "workspace";
    case MemKind::Data: return "data";
    case MemKind::kCount: break;
  }
  return "?";
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker tracker;
  return tracker;
}

static void raise_to(std::atomic<size_t>& peak, size_t value) {
  size_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

void MemoryTracker::on_alloc(MemKind kind, size_t bytes) {
  const size_t k = size_t(kind);
  raise_to(peak_[k], current_[k].fetch_add(bytes) + bytes);
  raise_to(peak_total_, total_.fetch_add(bytes) + bytes);
}

void MemoryTracker::on_free(MemKind kind, size_t bytes) {
  current_[size_t(kind)].fetch_sub(bytes);
  total_.fetch_sub(bytes);
}

void MemoryTracker::reset_peaks() {
  for (size_t k = 0; k < kNumMemKinds; ++k) peak_[k].store(current_[k].load());
  peak_total_.store(total_.load());
}

}  // namespace gemmax
