// One forward and backward of the whole model on a backend: the tests that compare paths
// (backends, kernel choices) of the same step.
#pragma once

#include <cstring>

#include "gemmax/backend/backend.h"
#include "gemmax/model/context.h"
#include "gemmax/model/gemma4.h"

namespace gemmax::testing {

// The loss info into *info, and the gradient of `host_weights` copied to the host.
inline Tensor model_gradients(Backend& be, const ModelConfig& cfg, const Batch& batch, DType act,
                              const Tensor& host_weights, LossInfo* info) {
  const Tensor w = be.to_device(host_weights, MemKind::Params);
  const Tensor g = be.zeros({host_weights.numel()}, DType::F32, MemKind::Grads);
  const StepInputs in = upload_batch(be, batch);
  *info = Gemma4Model(cfg, be, {act, RematPolicy::Full, 2}).forward_backward(in, w, g);
  const Tensor h = be.to_host(g);
  Tensor copy = Tensor::empty(h.shape(), h.dtype());
  std::memcpy(copy.raw(), h.raw(), h.nbytes());
  return copy;
}

}  // namespace gemmax::testing
