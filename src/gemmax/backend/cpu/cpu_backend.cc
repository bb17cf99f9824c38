// The cpu backend's setup and memory.
#include "gemmax/backend/cpu/cpu_backend.h"

#include <omp.h>

#include <cstring>

#include "gemmax/backend/cpu/common.h"

namespace gemmax {
using namespace cpu;

namespace {

// Threads when num_threads is 0: the cores this process may use (its CPU affinity).
int default_threads() { return omp_get_num_procs(); }

constexpr int64_t kAttentionScratch = int64_t(16) << 20;  // per thread

}  // namespace

CpuBackend::CpuBackend(const BackendOptions& options)
    : isa_(choose_isa(options.isa, &isa_why_)),
      threads_(options.num_threads > 0 ? options.num_threads : default_threads()) {
  omp_set_num_threads(threads_);
  const int64_t shared = gemm_shared_bytes(isa_), per_thread = gemm_thread_bytes(isa_);
  // Attention's scratch, times packed_width (avx512_fp32's key panels are fp32), so that every
  // family caches the same key blocks.
  const int64_t attention =
      (options.attention_scratch_bytes > 0 ? (options.attention_scratch_bytes + 63) / 64 * 64
                                           : kAttentionScratch) *
      packed_width(isa_);
  {
    const AllocationScope what(str_cat("the cpu backend's scratch for ", threads_,
                                       " threads (num_threads)"));
    scratch_ = alloc({shared + (per_thread + attention) * threads_}, DType::U8, MemKind::Workspace);
  }
  char* base = static_cast<char*>(scratch_.raw());
  gemm_.shared = base;
  gemm_.shared_bytes = shared;
  gemm_.thread_bytes = per_thread;
  for (int t = 0; t < threads_; ++t) gemm_.thread.push_back(base + shared + per_thread * t);
  base += shared + per_thread * threads_;
  attention_scratch_bytes_ = attention;
  for (int t = 0; t < threads_; ++t) attention_scratch_.push_back(base + attention * t);
}

std::string CpuBackend::describe() const {
  const char* slower = isa_ == Isa::Avx2 ? ", slower:" : ",";
  return str_cat("cpu (", isa_name(isa_), " kernels", slower, " ", isa_why_, "; ", threads_,
                 " threads)");
}

Tensor CpuBackend::alloc(const Shape& shape, DType dtype, MemKind kind) {
  for (int64_t d : shape) GEMMAX_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  auto st = std::make_shared<Storage>();
  st->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  st->ptr = allocator_->allocate(st->bytes);
  st->kind = kind;
  st->tracker = &tracker();
  st->release = HostAllocator::release;
  st->allocator = allocator_.get();
  st->keep_alive = allocator_;  // blocks go back to the cache even after the backend is gone
  st->tracker->on_alloc(kind, st->bytes);
  return Tensor::from_storage(std::move(st), shape, dtype);
}

void CpuBackend::upload(const Tensor& dst, const Tensor& host) {
  GEMMAX_CHECK(dst.dtype() == host.dtype() && dst.numel() == host.numel(), "upload: ", host.str(),
               " into ", dst.str());
  std::memcpy(dst.raw(), host.raw(), host.nbytes());
}

}  // namespace gemmax
