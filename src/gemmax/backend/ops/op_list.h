// Every backend op, one X(name, Args, family) per op: the list the Backend interface, the planning
// and profiling decorators and the backends' declarations are written from. Adding an op: its
// struct, validate and X entry in the header of its kind (this folder), then one implementation
// per backend.
#pragma once

#include "gemmax/backend/ops/attention.h"
#include "gemmax/backend/ops/elementwise.h"
#include "gemmax/backend/ops/embedding.h"
#include "gemmax/backend/ops/geglu.h"
#include "gemmax/backend/ops/gmm.h"
#include "gemmax/backend/ops/loss.h"
#include "gemmax/backend/ops/matmul.h"
#include "gemmax/backend/ops/moe.h"
#include "gemmax/backend/ops/norm_rope.h"
#include "gemmax/backend/ops/optimizer.h"
#include "gemmax/backend/ops/quantize.h"

// The ops every backend implements.
#define GEMMAX_REQUIRED_OPS(X) \
  GEMMAX_ELEMENTWISE_OPS(X)    \
  GEMMAX_MATMUL_OPS(X)         \
  GEMMAX_EMBEDDING_OPS(X)      \
  GEMMAX_NORM_ROPE_OPS(X)      \
  GEMMAX_ATTENTION_OPS(X)      \
  GEMMAX_GEGLU_OPS(X)          \
  GEMMAX_MOE_OPS(X)            \
  GEMMAX_GMM_OPS(X)            \
  GEMMAX_LOSS_OPS(X)           \
  GEMMAX_OPTIMIZER_OPS(X)      \
  GEMMAX_QUANTIZE_OPS(X)

#define GEMMAX_BACKEND_OPS(X) \
  GEMMAX_REQUIRED_OPS(X)      \
  GEMMAX_VOCAB_LOSS_OPS(X)

// A backend's declarations of its implementations: `GEMMAX_BACKEND_OPS(GEMMAX_OP_OVERRIDE)`.
#define GEMMAX_OP_OVERRIDE(name, Args, family) \
  void do_##name(const Args& args, OpDims<Args> dims) override;
