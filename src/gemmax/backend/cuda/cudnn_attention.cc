// Compiled with the cuda backend only (CMakeLists.txt); the graph code with the cuDNN frontend
// only (GEMMAX_WITH_CUDNN_FRONTEND, defined on this file alone).
#include "gemmax/backend/cuda/cudnn_attention.h"

#include <map>
#include <mutex>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"

#ifdef GEMMAX_WITH_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace gemmax::cuda {

#ifndef GEMMAX_WITH_CUDNN_FRONTEND

std::string cudnn_frontend_version() { return ""; }
std::string cudnn_library_version() { return ""; }

std::string cudnn_unavailable() {
  return "this build has no cuDNN frontend (CMake found neither a fetched copy nor "
         "GEMMAX_CUDNN_FRONTEND_DIR; see README.md, building with cuDNN)";
}

struct CudnnAttention::Impl {};
CudnnAttention::CudnnAttention(cudaStream_t) { fail("cuda_attention=cudnn: ", cudnn_unavailable()); }
CudnnAttention::~CudnnAttention() = default;
std::string CudnnAttention::forward(const SdpaPlan&, void*, float*, const void*, const void*,
                                    const void*, const Workspace&) {
  return cudnn_unavailable();
}
std::string CudnnAttention::backward(const SdpaPlan&, void*, void*, void*, const void*,
                                     const void*, const void*, const void*, const void*,
                                     const float*, const Workspace&) {
  return cudnn_unavailable();
}

#else

namespace fe = cudnn_frontend;
namespace {

// The oldest library the graphs are known to build on (the version the build was tested with).
constexpr size_t kMinCudnn = 91900;

// Tensor uids of the graphs' variant packs.
enum : int64_t { kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv };

void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) fail("cuDNN error in ", what, ": ", cudnnGetErrorString(s));
}

std::vector<int64_t> vec(const std::array<int64_t, 4>& a) { return {a.begin(), a.end()}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name,
                                                    int64_t uid, const SdpaTensor& t) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(vec(t.dim))
                      .set_stride(vec(t.stride)));
}

void output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid,
            const SdpaTensor& l) {
  t->set_output(true).set_uid(uid).set_dim(vec(l.dim)).set_stride(vec(l.stride));
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// The mask of a plan on either attribute set: causal from the top left, and the window.
template <class A>
A& mask(A& a, const SdpaPlan& p) {
  a.set_attn_scale(p.scale)
      .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
      .set_diagonal_band_right_bound(0);
  if (p.left_bound > 0) a.set_diagonal_band_left_bound(int(p.left_bound));
  return a;
}

// Validation, heuristics and the plan build; the first error is returned, not raised: cuDNN
// refusing a graph sends the call to the kernels.
std::string build(fe::graph::Graph& g, cudnnHandle_t h) {
  for (auto step : {+[](fe::graph::Graph& g, cudnnHandle_t) { return g.validate(); },
                    +[](fe::graph::Graph& g, cudnnHandle_t h) { return g.build_operation_graph(h); },
                    +[](fe::graph::Graph& g, cudnnHandle_t) {
                      return g.create_execution_plans({fe::HeurMode_t::A});
                    },
                    +[](fe::graph::Graph& g, cudnnHandle_t h) { return g.check_support(h); },
                    +[](fe::graph::Graph& g, cudnnHandle_t h) { return g.build_plans(h); }}) {
    fe::error_t e = step(g, h);
    if (e.is_bad()) return e.get_message().empty() ? std::string("refused") : e.get_message();
  }
  return "";
}

}  // namespace

std::string cudnn_frontend_version() {
  return str_cat(CUDNN_FRONTEND_MAJOR_VERSION, ".", CUDNN_FRONTEND_MINOR_VERSION, ".",
                 CUDNN_FRONTEND_PATCH_VERSION);
}

std::string cudnn_library_version() {
  const size_t v = cudnnGetVersion();
  return str_cat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

std::string cudnn_unavailable() {
  const size_t v = cudnnGetVersion();
  if (v / 10000 != CUDNN_MAJOR || v < kMinCudnn)
    return str_cat("the cuDNN library loaded is ", cudnn_library_version(), "; this build needs cuDNN ", CUDNN_MAJOR, " at ", kMinCudnn / 10000, ".",
                   kMinCudnn / 100 % 100, " or later (put its lib directory first on "
                   "LD_LIBRARY_PATH)");
  return "";
}

struct CudnnAttention::Impl {
  struct Entry {
    std::shared_ptr<fe::graph::Graph> graph;  // null when refused
    std::string refused;
    int64_t workspace = 0;
  };
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
  std::map<std::pair<SdpaPlan::Key, bool>, Entry> graphs;  // (plan, backward)

  Entry& entry(const SdpaPlan& p, bool backward) {
    auto [it, fresh] = graphs.try_emplace({p.key(), backward});
    Entry& e = it->second;
    if (!fresh) return e;
    auto g = new_graph();
    auto q = input(*g, "q", kQ, p.q), k = input(*g, "k", kK, p.k), v = input(*g, "v", kV, p.v);
    if (!backward) {
      auto a = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true);
      auto [o, stats] = g->sdpa(q, k, v, mask(a, p));
      output(o, kO, p.o);
      output(stats, kStats, p.stats);
      stats->set_data_type(fe::DataType_t::FLOAT);
    } else {
      auto o = input(*g, "o", kO, p.o), dout = input(*g, "dout", kDout, p.o);
      auto stats = input(*g, "stats", kStats, p.stats);
      stats->set_data_type(fe::DataType_t::FLOAT);
      // Deterministic: a resumed run repeats the uninterrupted one bit for bit.
      auto a = fe::graph::SDPA_backward_attributes()
                   .set_name("sdpa_backward")
                   .set_deterministic_algorithm(true);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, mask(a, p));
      output(dq, kDq, p.q);
      output(dk, kDk, p.k);
      output(dv, kDv, p.v);
    }
    e.refused = build(*g, handle);
    if (e.refused.empty() && g->get_workspace_size(e.workspace).is_bad())
      e.refused = "cuDNN cannot size the graph's workspace";
    if (e.refused.empty()) e.graph = std::move(g);
    return e;
  }

  std::string run(const SdpaPlan& p, bool backward, std::unordered_map<int64_t, void*> pack,
                  const Workspace& workspace) {
    std::lock_guard<std::mutex> lock(mutex);
    Entry& e = entry(p, backward);
    if (!e.graph) return str_cat("cuDNN refused the graph: ", e.refused);
    void* ws = workspace(e.workspace);
    fe::error_t r = e.graph->execute(handle, pack, ws);
    if (r.is_bad())
      fail("cuDNN's attention ", backward ? "backward" : "forward", " failed to run: ",
           r.get_message());
    return "";
  }
};

CudnnAttention::CudnnAttention(cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  const std::string why = cudnn_unavailable();
  GEMMAX_CHECK(why.empty(), "cuda_attention=cudnn: ", why);
  check_cudnn(cudnnCreate(&impl_->handle), "cudnnCreate");
  check_cudnn(cudnnSetStream(impl_->handle, stream), "cudnnSetStream");
}

CudnnAttention::~CudnnAttention() {
  impl_->graphs.clear();
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

std::string CudnnAttention::forward(const SdpaPlan& plan, void* o, float* lse, const void* q,
                                    const void* k, const void* v, const Workspace& workspace) {
  return impl_->run(plan, false,
                    {{kQ, const_cast<void*>(q)},
                     {kK, const_cast<void*>(k)},
                     {kV, const_cast<void*>(v)},
                     {kO, o},
                     {kStats, lse}},
                    workspace);
}

std::string CudnnAttention::backward(const SdpaPlan& plan, void* dq, void* dk, void* dv,
                                     const void* dout, const void* q, const void* k,
                                     const void* v, const void* o, const float* lse,
                                     const Workspace& workspace) {
  return impl_->run(plan, true,
                    {{kQ, const_cast<void*>(q)},
                     {kK, const_cast<void*>(k)},
                     {kV, const_cast<void*>(v)},
                     {kO, const_cast<void*>(o)},
                     {kDout, const_cast<void*>(dout)},
                     {kStats, const_cast<float*>(lse)},
                     {kDq, dq},
                     {kDk, dk},
                     {kDv, dv}},
                    workspace);
}

#endif

}  // namespace gemmax::cuda
