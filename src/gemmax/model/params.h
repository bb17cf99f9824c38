// The parameter registry: every parameter of a Gemma-4 model is declared here, once.
//
// Checkpoint IO, the optimizer, weight decay, FSDP sharding, the memory plan and parameter counting
// all read this table; nothing else lists parameters. On one device parameters live back to back in
// flat buffers (weights, gradients, Adam moments share the same offsets), in the order declared, so
// that mlp.gate_proj and mlp.up_proj form one fused [2F, D] matrix, as the experts' gate_up_proj
// does. Under FSDP each rank holds the pieces parallel/shard_layout.h derives from `fsdp` below.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gemmax/base/tensor.h"
#include "gemmax/config/model_config.h"

namespace gemmax {

struct ParamSpec;

// The kind of a parameter, as initialisation tells kinds apart (docs/MODEL.md §4.9).
enum class ParamInit {
  Ones,       // norm weights, router.scale, router.per_expert_scale, layer_scalar
  Embedding,  // embed_tokens
  Query,      // q_proj (MaxText divides it by √hd)
  Attention,  // k_proj, v_proj, o_proj
  Dense,      // the dense MLP and the router: MaxText's MoE block kernels
  ExpertIn,   // experts.gate_up_proj
  ExpertOut,  // experts.down_proj
  LoraA,      // a LoRA adapter's A: PEFT's kaiming-uniform, U(-1/sqrt(in), 1/sqrt(in))
  Zeros,      // a LoRA adapter's B
};

// How one parameter's initial values are drawn: N(0, std²), or with `truncated` a normal cut
// at ±2 of its scale and rescaled to standard deviation `std` (JAX's truncated_normal).
struct InitDistribution {
  double std = 0;
  bool truncated = false;
};
// For a parameter drawn from a normal (not Ones, LoraA or Zeros), under the config's init_scheme.
InitDistribution init_distribution(const ModelConfig& config, const ParamSpec& spec);

// How FSDP stores a parameter over N ranks (parallel/shard_layout.h, docs/FSDP.md).
enum class FsdpRole : uint8_t {
  // A matrix of a decoder layer: the layer's matrices, back to back in declaration order, form one
  // flat buffer split into N equal contiguous pieces (zero-padded at the end); the layer's
  // compute-dtype weights are all-gathered from them before each use.
  LayerMatrix,
  // A small vector (norm scales, router.scale, per_expert_scale, layer_scalar): replicated on every
  // rank, its gradient all-reduced (seed change 1, small vectors replicated:
  // docs/FSDP.md#the-seeds-sharding-choices); with fsdp_replicate_small_params=false it is
  // sharded like the matrices, in its layer's flat fp32 buffer of vectors, and gathered per layer.
  SmallVector,
  // The embedding table [V, D]: sharded along the vocabulary, rank r holding rows
  // [r ceil(V/N), (r+1) ceil(V/N)) (seed change 3, the embedding sharded along the vocabulary:
  // docs/FSDP.md#the-seeds-sharding-choices).
  VocabRows,
};

struct ParamSpec {
  std::string
      name;  // the Hugging Face name without its prefix ("model." or "model.language_model.")
  Shape shape;
  ParamInit init = ParamInit::Ones;
  int64_t layer = -1;          // decoder layer, or -1 (embedding, final norm)
  int64_t offset = 0;          // elements into the flat buffers
  bool routed_expert = false;  // only top-k of num_experts of it is active per token
  FsdpRole fsdp = FsdpRole::LayerMatrix;

  int64_t numel() const { return shape_numel(shape); }
};

class ParamTable {
 public:
  explicit ParamTable(const ModelConfig& config);
  // A registry of other parameters than the model's own, in this order (a LoRA run's adapters:
  // model/lora/adapters.h); offsets are assigned here.
  ParamTable(const ModelConfig& config, const std::vector<ParamSpec>& specs);

  const ModelConfig& config() const { return config_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // Throws gemmax::Error naming the parameter if it does not exist in this model.
  const ParamSpec& at(const std::string& name) const;
  const ParamSpec* find(const std::string& name) const;

  int64_t total() const { return total_; }  // elements in the flat buffer
  int64_t active() const;                   // per token: top-k of the routed experts

  // A view of one parameter inside a flat buffer (weights, gradients or moments).
  Tensor view(const Tensor& flat, const std::string& name) const;

 private:
  void add(std::string name, Shape shape, ParamInit init, int64_t layer, FsdpRole fsdp,
           bool routed_expert = false);

  ModelConfig config_;
  std::vector<ParamSpec> specs_;
  std::map<std::string, size_t> index_;
  int64_t total_ = 0;
};

// Which parameters `freeze` (a regex searched in each "model."-prefixed HF name) leaves
// trainable. Empty: all. Throws if the pattern is invalid, matches nothing or everything.
std::vector<bool> trainable_params(const ParamTable& table, const std::string& freeze);

// Fills a flat weight buffer from scratch: ones for norm scales, router scales and layer_scalar;
// every matrix and the embedding from init_distribution (the config's init_scheme). Each
// parameter draws from its own stream, so values do not depend on declaration order.
void init_params(const ParamTable& table, const Tensor& flat, uint64_t seed);
// Elements [begin, begin + count) of parameter `spec`'s initial values (flattened), into `out`
// (numel count): the same values init_params gives them, generated without the ones before.
void init_param_range(const ParamTable& table, const ParamSpec& spec, int64_t begin,
                      const Tensor& out, uint64_t seed);

}  // namespace gemmax
