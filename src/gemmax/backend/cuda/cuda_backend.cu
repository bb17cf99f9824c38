#include <cxxabi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "gemmax/backend/cuda/cuda_backend.h"
#include "gemmax/backend/cuda/module_api.h"
#include "gemmax/base/module_interface.h"  // generated: GEMMAX_MODULE_INTERFACE
#include "gemmax/backend/cuda/device_error.h"
#include "gemmax/base/strings.h"

namespace gemmax::cuda {
namespace {

// The backend's scratch: the error record, cuBLASLt's workspace (32 MiB: what NVIDIA advises
// for Hopper) and the op layer's arena.
constexpr size_t kErrorBytes = 256;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr size_t kOpScratchBytes = size_t(32) << 20;
// The most a library call (cuDNN's attention backward) may take beyond cuBLASLt's workspace.
constexpr size_t kLibraryWorkspaceLimit = size_t(4) << 30;

void release_device(void* allocator, void* p, size_t) {
  static_cast<DeviceAllocator*>(allocator)->release(p);
}

std::atomic<const char*> last_launch{nullptr};
bool sync_check_on = false;  // cuda_sync_check of the backend last made

// A kernel functor's readable name (gemmax::kern::GmmForwardMmaKernel, ...).
std::string kernel_name(const char* name) {
  if (name == nullptr) return "none yet";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

// Errors after which the context is unusable: every later CUDA call returns them again.
bool sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

// Out of memory is not sticky: reading it clears it; anything else read there is raised.
void clear_out_of_memory() {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaErrorMemoryAllocation) check_cuda(e, "cudaMalloc");
}

}  // namespace

void note_launch(const char* name) { last_launch.store(name, std::memory_order_relaxed); }

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  if (sticky(e))
    fail("a kernel faulted on the device (", cudaGetErrorName(e), ": ", cudaGetErrorString(e),
         "), seen at ", what, "; the CUDA context is lost and the run cannot go on. The last "
         "kernel launched was ", kernel_name(last_launch.load(std::memory_order_relaxed)),
         sync_check_on ? " (cuda_sync_check=true: the fault is in it)"
                       : "; kernels run asynchronously, so the fault may be in an earlier one: "
                         "rerun with cuda_sync_check=true to name the kernel that faulted");
  fail("CUDA error in ", what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

void warn_cuda(cudaError_t e, const char* what) {
  static std::atomic<bool> warned{false};
  if (e == cudaSuccess || e == cudaErrorCudartUnloading || warned.exchange(true)) return;
  std::fprintf(stderr, "gemmax: cuda backend: %s while releasing %s (later ones not shown)\n",
               cudaGetErrorString(e), what);
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  // A fault elsewhere shows up in cuBLASLt as an execution failure: the runtime says which.
  if (s == CUBLAS_STATUS_EXECUTION_FAILED || s == CUBLAS_STATUS_INTERNAL_ERROR)
    check_cuda(cudaGetLastError(), what);
  fail("cuBLASLt error in ", what, ": ", cublasLtGetStatusString(s), " (", int(s), ")");
}

// ---- allocator ---------------------------------------------------------------------------

DeviceAllocator& DeviceAllocator::instance() {
  static DeviceAllocator* a = new DeviceAllocator();  // never destroyed: outlives the context
  return *a;
}

size_t DeviceAllocator::round(size_t bytes) {
  if (bytes < (size_t(1) << 20)) return (bytes + 511) / 512 * 512 + (bytes == 0 ? 512 : 0);
  return (bytes + (size_t(2) << 20) - 1) / (size_t(2) << 20) * (size_t(2) << 20);
}

void* DeviceAllocator::allocate(size_t bytes) {
  const size_t size = round(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_.find(size);
  if (it != free_.end()) {
    void* p = it->second;
    free_.erase(it);
    in_use_ += size;
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation) {
    clear_out_of_memory();
    release_cache();
    e = cudaMalloc(&p, size);
  }
  if (e == cudaErrorMemoryAllocation) {
    clear_out_of_memory();
    size_t free_bytes = 0, total = 0;
    const bool info = cudaMemGetInfo(&free_bytes, &total) == cudaSuccess;
    fail("out of device memory allocating ", format_bytes(double(bytes)), " (tensors use ",
         format_bytes(double(in_use_)),
         info ? str_cat(", the device has ", format_bytes(double(free_bytes)), " free of ",
                        format_bytes(double(total)))
              : std::string(),
         "): lower per_device_batch_size or max_target_length, set remat_policy=full, or raise "
         "num_vocab_tiling (dry_run=true prints the memory plan)");
  }
  check_cuda(e, str_cat("cudaMalloc of ", format_bytes(double(bytes))).c_str());
  size_of_[p] = size;
  in_use_ += size;
  reserved_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return p;
}

void DeviceAllocator::release(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t size = size_of_.at(p);
  in_use_ -= size;
  free_.emplace(size, p);
}

void DeviceAllocator::release_cache() {
  check_cuda(cudaDeviceSynchronize(), "the synchronisation before releasing cached memory");
  for (auto& [size, p] : free_) {
    check_cuda(cudaFree(p), "cudaFree of cached memory");
    size_of_.erase(p);
    reserved_ -= size;
  }
  free_.clear();
}

// ---- platform ----------------------------------------------------------------------------

struct CudaPlatform::GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~GemmPlan() {
    if (op) warn_cublas(cublasLtMatmulDescDestroy(op));
    for (cublasLtMatrixLayout_t l : {a, b, c})
      if (l) warn_cublas(cublasLtMatrixLayoutDestroy(l));
  }
  static void warn_cublas(cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS)
      std::fprintf(stderr, "gemmax: cuda backend: %s while releasing a matmul plan\n",
                   cublasLtGetStatusString(s));
  }
};

CudaPlatform::~CudaPlatform() {
  cudnn_.reset();
  if (library_block_) DeviceAllocator::instance().release(library_block_);
  plans_.clear();
  if (lt_) GemmPlan::warn_cublas(cublasLtDestroy(lt_));
  if (compute_) warn_cuda(cudaStreamDestroy(compute_), "the compute stream");
  if (comm_) warn_cuda(cudaStreamDestroy(comm_), "the comm stream");
}

void CudaPlatform::check_launch(const char* kernel) {
  check_cuda(cudaGetLastError(), str_cat("the launch of ", kernel_name(kernel)).c_str());
  if (sync_check_)
    check_cuda(cudaStreamSynchronize(compute_),
               str_cat("the run of ", kernel_name(kernel), " (cuda_sync_check=true)").c_str());
}

void* CudaPlatform::library_workspace(int64_t bytes) {
  const size_t block = cudnn_workspace_block(bytes, workspace_bytes_, kLibraryWorkspaceLimit);
  if (block == 0) return workspace_;
  if (block > library_block_bytes_) {
    // Blocks are reused in stream order: the old one may still be read by queued work, and the
    // allocator hands it out only to later work.
    if (library_block_) DeviceAllocator::instance().release(library_block_);
    library_block_ = nullptr;
    library_block_bytes_ = 0;
    library_block_ = DeviceAllocator::instance().allocate(block);
    library_block_bytes_ = block;
  }
  return library_block_;
}

void CudaPlatform::copy_bytes(void* dst, const void* src, size_t n) {
  check_cuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, compute_), "copy");
}

namespace {

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    default:
      fail("cuda backend: matmul on ", dtype_name(t),
           ": inputs must be float32 or bfloat16 (float64 runs: backend=reference)");
  }
}

// The largest power of two (up to 256) dividing the address: what cuBLASLt may assume.
int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % uintptr_t(al) != 0) al /= 2;
  return al;
}

}  // namespace

// Key: M, N, K, trans_a, trans_b, input dtype, output dtype, and the four alignments.
CudaPlatform::GemmPlan& CudaPlatform::gemm_plan(const GemmKey& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [M, N, K, ta, tb, in_t, out_t, al_a, al_b, al_c, al_accum] = key;
  auto plan = std::make_unique<GemmPlan>();
  const cudaDataType_t ti = lt_type(DType(in_t)), to = lt_type(DType(out_t));
  // Row-major C[M, N] is column-major C^T[N, M] = op(b)^T . op(a)^T: cuBLASLt's A is b, B is a.
  check_cublas(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_cublas(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)),
      "matmul transa");
  check_cublas(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)),
      "matmul transb");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->a, ti, tb ? K : N, tb ? N : K, tb ? K : N),
               "layout of b");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->b, ti, ta ? M : K, ta ? K : M, ta ? M : K),
               "layout of a");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->c, to, N, M, N), "layout of c");
  cublasLtMatmulPreference_t pref;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "preference");
  // The preference is destroyed however this block is left.
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      owned(pref, &cublasLtMatmulPreferenceDestroy);
  const uint64_t ws = workspace_bytes_;
  check_cublas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof(ws)),
               "matmul preference (workspace)");
  const uint32_t aa = uint32_t(al_b), ab = uint32_t(al_a), ac = uint32_t(al_c);
  for (const auto& [attr, value] :
       {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac}})
    check_cublas(cublasLtMatmulPreferenceSetAttribute(pref, attr, value, sizeof(uint32_t)),
                 "matmul preference (alignment)");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt_, plan->op, plan->a, plan->b, plan->c,
                                                          plan->c, pref, 1, &result, &found);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0)
    fail("cuBLASLt has no algorithm for the matmul [", M, ", ", K, "] x [", K, ", ", N, "] (",
         dtype_name(DType(in_t)), " -> ", dtype_name(DType(out_t)), ", alignments ", al_a, "/",
         al_b, "/", al_c, ")");
  plan->algo = result.algo;
  (void)al_accum;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void CudaPlatform::matmul(const Tensor& c, const Tensor& a, bool ta, const Tensor& b, bool tb,
                          bool acc) {
  // Shapes and dtypes: checked by the Backend entry point (backend/ops/matmul.h).
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t N = tb ? b.dim(0) : b.dim(1);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!acc) check_cuda(cudaMemsetAsync(c.raw(), 0, c.nbytes(), compute_), "matmul");
    return;
  }
  const GemmKey key{M,
                    N,
                    K,
                    int(ta),
                    int(tb),
                    int(a.dtype()),
                    int(c.dtype()),
                    alignment(a.raw()),
                    alignment(b.raw()),
                    alignment(c.raw()),
                    int(acc)};
  GemmPlan& plan = gemm_plan(key);
  const float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
  note_launch("cublasLtMatmul");
  check_cublas(
      cublasLtMatmul(lt_, plan.op, &alpha, b.raw(), plan.a, a.raw(), plan.b, &beta, c.raw(), plan.c,
                     c.raw(), plan.c, &plan.algo, workspace_, workspace_bytes_, compute_),
      "cublasLtMatmul");
  if (sync_check_)
    check_cuda(cudaStreamSynchronize(compute_), "the run of cublasLtMatmul (cuda_sync_check=true)");
}

// ---- backend -----------------------------------------------------------------------------

namespace {
bool device_available(std::string* why);  // below, with the module's entry point
}  // namespace

CudaBackend::CudaBackend(const BackendOptions& options) {
  std::string why;
  if (!device_available(&why)) fail("backend=cuda: ", why);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  check_cuda(cudaStreamCreateWithFlags(&p_.compute_, cudaStreamNonBlocking), "compute stream");
  check_cuda(cudaStreamCreateWithFlags(&p_.comm_, cudaStreamNonBlocking), "comm stream");
  check_cuda(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "event");
  check_cuda(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming), "event");
  check_cublas(cublasLtCreate(&p_.lt_), "cublasLtCreate");
  p_.fast_kernels_ = options.cuda_kernels == CudaKernels::Fast;
  p_.sm90_gmm_ = options.cuda_gmm == CudaGmm::Sm90;
  GEMMAX_CHECK(!p_.sm90_gmm_ || (prop.major == 9 && prop.minor == 0), "cuda_gmm=sm90: ",
               prop.name, " is sm_", prop.major, prop.minor,
               "; the wgmma kernels are built for sm_90a (H100, H200) only: cuda_gmm=mma");
  p_.attention_ = options.cuda_attention;
  GEMMAX_CHECK(p_.attention_ == CudaAttention::kMma || (prop.major == 9 && prop.minor == 0),
               "cuda_attention=", name_of(options.cuda_attention), ": ", prop.name, " is sm_", prop.major,
               prop.minor, "; these kernels are built for sm_90a (H100, H200) only: cuda_attention=mma");
  // Refuses, saying why, a build without the cuDNN frontend or a cuDNN library too old.
  if (p_.attention_ == CudaAttention::kCudnn)
    p_.cudnn_ = std::make_unique<CudnnAttention>(p_.compute_);
  p_.sync_check_ = sync_check_on = options.cuda_sync_check;
  scratch_ = alloc({int64_t(kErrorBytes + kWorkspaceBytes + kOpScratchBytes)}, DType::U8,
                   MemKind::Workspace);
  char* base = static_cast<char*>(scratch_.raw());
  check_cuda(cudaMemsetAsync(base, 0, kErrorBytes, p_.compute_), "scratch");
  p_.errors_ = reinterpret_cast<kern::DeviceError*>(base);
  p_.workspace_ = base + kErrorBytes;
  p_.workspace_bytes_ = kWorkspaceBytes;
  p_.scratch_ = base + kErrorBytes + kWorkspaceBytes;
  p_.scratch_bytes_ = kOpScratchBytes;
  description_ = str_cat("cuda (", prop.name, ", sm_", prop.major, prop.minor, ", ",
                         format_bytes(double(prop.totalGlobalMem)), ", ",
                         p_.fast_kernels_ ? "tensor-core" : "plain",
                         " kernels for bfloat16 attention and grouped matmuls",
                         p_.sm90_gmm_ ? ", grouped matmuls on sm90 wgmma/TMA" : "",
                         attention_note(p_.attention_),
                         p_.cudnn_ ? str_cat(" (cuDNN ", cudnn_library_version(), ", frontend ",
                                             cudnn_frontend_version(), ")")
                                   : std::string(),
                         p_.sync_check_ ? "; cuda_sync_check: every launch checked" : "", ")");
}

CudaBackend::~CudaBackend() {
  if (p_.compute_) warn_cuda(cudaStreamSynchronize(p_.compute_), "the backend (its last kernels)");
  if (compute_done_) warn_cuda(cudaEventDestroy(compute_done_), "an event");
  if (comm_done_) warn_cuda(cudaEventDestroy(comm_done_), "an event");
}

Tensor CudaBackend::alloc(const Shape& shape, DType dtype, MemKind kind) {
  for (int64_t d : shape) GEMMAX_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  auto st = std::make_shared<Storage>();
  st->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  st->ptr = DeviceAllocator::instance().allocate(st->bytes);
  st->device = Device::Cuda;
  st->kind = kind;
  st->tracker = &tracker();
  st->release = &release_device;
  st->allocator = &DeviceAllocator::instance();
  tracker().on_alloc(kind, st->bytes);
  return Tensor::from_storage(std::move(st), shape, dtype);
}

void CudaBackend::upload(const Tensor& dst, const Tensor& host) {
  GEMMAX_CHECK(dst.dtype() == host.dtype() && dst.numel() == host.numel(), "upload: ", host.str(),
               " into ", dst.str());
  if (host.nbytes() == 0) return;
  // From pageable memory the copy is staged before this returns: `host` may go at once.
  check_cuda(
      cudaMemcpyAsync(dst.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice, p_.compute_),
      "upload");
}

Tensor CudaBackend::to_host(const Tensor& t) {
  // Host copies are not device memory: they are counted apart from the tracker of the plan.
  static MemoryTracker host_copies;
  Tensor host = Tensor::empty(t.shape(), t.dtype(), MemKind::Workspace, host_copies);
  if (t.nbytes() > 0)
    check_cuda(
        cudaMemcpyAsync(host.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, p_.compute_),
        "to_host");
  kern::DeviceError e{};
  check_cuda(cudaMemcpyAsync(&e, p_.errors_, sizeof(e), cudaMemcpyDeviceToHost, p_.compute_),
             "to_host");
  check_cuda(cudaStreamSynchronize(p_.compute_), "the step's kernels");
  if (e.code != kern::DeviceError::kNone) {
    check_cuda(cudaMemsetAsync(p_.errors_, 0, sizeof(e), p_.compute_), "to_host");
    raise_device_error(e);
  }
  return host;
}

void CudaBackend::synchronize() {
  check_cuda(cudaStreamSynchronize(p_.compute_), "the step's kernels");
}

void CudaBackend::wait_for_compute() {
  check_cuda(cudaEventRecord(compute_done_, p_.compute_), "event");
  check_cuda(cudaStreamWaitEvent(p_.comm_, compute_done_, 0), "event");
}

void CudaBackend::wait_for_comm() {
  check_cuda(cudaEventRecord(comm_done_, p_.comm_), "event");
  check_cuda(cudaStreamWaitEvent(p_.compute_, comm_done_, 0), "event");
}

// ---- the module's entry point (module_api.h) ----------------------------------------------

namespace {

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (why)
      *why = e != cudaSuccess ? str_cat("cudaGetDeviceCount: ", cudaGetErrorString(e))
                              : std::string("no CUDA device is visible");
    cudaGetLastError();
    return false;
  }
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    if (why) *why = "cannot read the device's properties";
    return false;
  }
  if (prop.major < 9) {
    if (why)
      *why = str_cat(prop.name, " is sm_", prop.major, prop.minor,
                     "; the cuda backend is built for Hopper (sm_90) and newer");
    return false;
  }
  return true;
}

int use_device_of_rank(int rank) {
  std::string why;
  if (!device_available(&why)) fail("backend=cuda on rank ", rank, ": ", why);
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int r = local ? std::atoi(local) : rank;
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  check_cuda(cudaSetDevice(r % count), "cudaSetDevice");
  return r % count;
}

CudaBackend& as_cuda(Backend& be) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  if (!c) fail("the ", be.name(), " backend has no CUDA stream");
  return *c;
}

void* compute_stream(Backend& be) { return as_cuda(be).compute_stream(); }
void* comm_stream(Backend& be) { return as_cuda(be).comm_stream(); }

// "built M.m, loaded M.m" for a library whose versions are integers like CUDA's (1000 M + 10 m).
std::string cuda_version_pair(int built, int loaded) {
  auto text = [](int v) { return str_cat(v / 1000, ".", (v % 1000) / 10); };
  return loaded > 0 ? str_cat(text(built), " (loaded ", text(loaded), ")") : text(built);
}

std::string versions() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string s = str_cat("CUDA runtime ", cuda_version_pair(CUDART_VERSION, runtime),
                          ", cuBLASLt ", cublasLtGetVersion());
  const std::string cudnn = cudnn_library_version();
  s += cudnn.empty() ? ", no cuDNN" : str_cat(", cuDNN ", cudnn);
  return s;
}

const ModuleApi kApi = {
    .interface = GEMMAX_MODULE_INTERFACE,
    .compiler = __VERSION__,
    .versions = versions,
    .make_backend = make_backend,
    .device_available = device_available,
    .use_device_of_rank = use_device_of_rank,
    .compute_stream = compute_stream,
    .comm_stream = comm_stream,
    .cudnn_frontend_version = cudnn_frontend_version,
    .cudnn_unavailable = cudnn_unavailable,
};

}  // namespace

}  // namespace gemmax::cuda

extern "C" const gemmax::cuda::ModuleApi* gemmax_cuda_module() { return &gemmax::cuda::kApi; }
