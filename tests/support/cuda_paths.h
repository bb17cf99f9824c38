// What the tests that compare the cuda backend's kernel paths (cuda_gmm, cuda_attention) share:
// a path's backend on the emulator or on a GPU, host and device copies of the operands, the
// comparison to bfloat16 rounding, and the small models whose step runs on each path.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/backend/cuda/emu/emulated_backend.h"
#include "gemmax/base/convert.h"
#include "model_gradients.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax::testing {

// A cuda backend on the emulator or, with gpu, on the GPU (every launch checked), with one path
// switch (`path`: &BackendOptions::cuda_gmm or cuda_attention) set to `value`.
template <class Path>
std::unique_ptr<Backend> cuda_backend(bool gpu, Path BackendOptions::*path, const char* value) {
  BackendOptions o;
  o.name = gpu ? "cuda" : "cuda_emulated";
  o.cuda_sync_check = gpu;
  o.*path = parse_named<Path>("path", value);
  return make_backend(o);
}

// Why a test on the GPU cannot run here, empty when it can (or when it is not on the GPU).
inline std::string no_gpu(bool gpu) {
  std::string why;
  return gpu && !cuda::cuda_device_available(&why) ? "no CUDA device: " + why : "";
}

inline Tensor host_clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}
// A copy of host tensor t for be: on its device, or a host copy for the reference backend
// (whose tensors are the host's). An undefined t stays undefined.
inline Tensor copy_for(Backend& be, const Tensor& t) {
  return !t.defined()               ? t
         : be.name() == "reference" ? host_clone(t)
                                    : be.to_device(t, MemKind::Workspace);
}
// be's tensor t, copied to a host tensor of its own.
inline Tensor host_result(Backend& be, const Tensor& t) { return host_clone(be.to_host(t)); }

// |got - want| <= (|want| + max |want|) / 128 elementwise: a few bfloat16 roundings (a bfloat16
// operand tile feeds each product).
inline void expect_close_bf16(const std::string& what, const Tensor& got, const Tensor& want) {
  conformance::Harness::expect_near(what, got, want, 1.0 / 128, 0, 1.0 / 128);
}

// A small model whose row lengths are multiples of 8, so that the tensor-core kernels apply;
// with sm90_attention, its sliding layers have head_dim 256 and its global ones 512 (the sm90
// attention's), groups of two query heads a kv head.
inline ModelConfig tensor_core_test_config(bool sm90_attention = false) {
  ModelConfig cfg = small_test_config(2);
  cfg.d_model = 32;
  cfg.moe_mlp_dim = 24;
  cfg.vocab_size = 64;
  if (sm90_attention) {
    cfg.num_heads = 2;
    cfg.num_kv_heads = 1;
    cfg.head_dim = 256;
    cfg.global_head_dim = 512;
  }
  return cfg;
}

// One bfloat16 step of cfg's model (trained-like weights) on `batch` on the emulator, with the
// path switch `path` set to each of `values`: the losses, the gradients and how many fallbacks
// and slow paths each noted (SlowPathNotes: a fast path that did not take a call says so), in
// that order.
struct PathSteps {
  std::vector<double> loss;
  std::vector<Tensor> grads;
  std::vector<size_t> notes;
};
template <class Path>
PathSteps step_per_path(const ModelConfig& cfg, const Batch& batch, Path BackendOptions::*path,
                        const std::vector<const char*>& values) {
  const Tensor host_w = trained_like_weights(ParamTable(cfg), 0.0, 0);
  PathSteps out;
  for (const char* value : values) {
    const std::unique_ptr<Backend> be = cuda_backend(false, path, value);
    LossInfo info;
    out.grads.push_back(model_gradients(*be, cfg, batch, DType::BF16, host_w, &info));
    out.loss.push_back(info.total_loss);
    out.notes.push_back(dynamic_cast<cuda::EmulatedBackend&>(*be).platform().slow_paths().count());
  }
  return out;
}

// Paths 0 (mma) and 1 (sm90) of `steps`: path 1 fell back nowhere path 0 did not, and its loss
// is path 0's to 1e-3 (the gradients are each test's to compare).
inline void expect_same_step_on_both_paths(const PathSteps& steps) {
  EXPECT_LE(steps.notes[1], steps.notes[0]) << "the sm90 path fell back where mma did not (see stderr)";
  EXPECT_NEAR(steps.loss[1], steps.loss[0], 1e-3 * std::abs(steps.loss[0]));
}

}  // namespace gemmax::testing
