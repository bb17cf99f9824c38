// The closed sets of values that config keys take, each with its names (base/value_names.h).
// The keys themselves are declared in keys.h; the backends' choices are in
// backend/backend_options.h, beside the options the backends read.
#pragma once

#include "gemmax/base/value_names.h"

namespace gemmax {

// What the forward keeps for the backward (docs/TRAINING.md §10). The backward of a layer first
// re-runs the layer's forward, which fills in only what was not kept.
enum class RematPolicy {
  None,     // keep every activation of every layer
  Minimal,  // keep the matmul outputs (q/k/v/out projections, MLP gate_up/down, router logits,
            // expert grouped-matmul outputs); recompute the rest
  Full,     // keep only each layer's input
};
GEMMAX_VALUE_NAMES(RematPolicy, {RematPolicy::Full, "full"}, {RematPolicy::Minimal, "minimal"},
                   {RematPolicy::None, "none"})

// MaxText's attention key: flash attention with fp32 scores (autoselected, flash), or MaxText's
// plain attention (dot_product), whose precision float32_qk_product and float32_logits switch.
enum class Attention { Autoselected, Flash, DotProduct };
GEMMAX_VALUE_NAMES(Attention, {Attention::Autoselected, "autoselected"}, {Attention::Flash, "flash"},
                   {Attention::DotProduct, "dot_product"})

enum class OptType { AdamW };
GEMMAX_VALUE_NAMES(OptType, {OptType::AdamW, "adamw"})

// The units Adam trains the embedding table in (docs/TRAINING.md §12).
enum class EmbeddingTable { MaxText, Hf };
GEMMAX_VALUE_NAMES(EmbeddingTable, {EmbeddingTable::MaxText, "maxtext"}, {EmbeddingTable::Hf, "hf"})

// How FSDP holds the embedding table (docs/FSDP.md).
enum class FsdpEmbedding { Auto, VocabParallel, Gather };
GEMMAX_VALUE_NAMES(FsdpEmbedding, {FsdpEmbedding::Auto, "auto"},
                   {FsdpEmbedding::VocabParallel, "vocab_parallel"}, {FsdpEmbedding::Gather, "gather"})

// The axis the output head's tiles run along under FSDP.
enum class VocabTilingAxis { Sequence, Batch };
GEMMAX_VALUE_NAMES(VocabTilingAxis, {VocabTilingAxis::Sequence, "sequence"},
                   {VocabTilingAxis::Batch, "batch"})

enum class DecoderBlock { Gemma4, Gemma4Small };
GEMMAX_VALUE_NAMES(DecoderBlock, {DecoderBlock::Gemma4, "gemma4"},
                   {DecoderBlock::Gemma4Small, "gemma4_small"})

// How a run that starts from scratch draws its weights (docs/MODEL.md §4.9).
enum class InitScheme {
  MaxText,  // MaxText's variance scaling per kind of kernel (fan-in, normal or truncated)
  Hf,       // Hugging Face: every matrix from N(0, initializer_range²)
};
GEMMAX_VALUE_NAMES(InitScheme, {InitScheme::MaxText, "maxtext"}, {InitScheme::Hf, "hf"})

// How a LoRA run keeps its frozen base matrices (lora_weight_qtype; MaxText's None is none).
enum class LoraWeightQtype {
  None,  // in the compute dtype (dtype)
  Nf4,   // QLoRA: NF4 blocks with an fp32 absmax each, dequantised as each layer runs
};
GEMMAX_VALUE_NAMES(LoraWeightQtype, {LoraWeightQtype::None, "none"}, {LoraWeightQtype::Nf4, "nf4"})

// What the load-balance loss's expert density counts (docs/TRAINING.md §7).
enum class LoadBalanceDensity {
  PerToken,   // the fraction of a sequence's tokens that chose the expert (sums to K)
  PerChoice,  // the fraction of its K choices per token (sums to 1): MaxText 0.2.5's, 1/K of it
};
GEMMAX_VALUE_NAMES(LoadBalanceDensity, {LoadBalanceDensity::PerToken, "per_token"},
                   {LoadBalanceDensity::PerChoice, "per_choice"})

// The data a run trains on, its tokenizer and how documents are packed into rows (docs/DATA.md).
enum class DatasetType { Builtin, Shards, Synthetic, Hf };
GEMMAX_VALUE_NAMES(DatasetType, {DatasetType::Builtin, "builtin"}, {DatasetType::Shards, "shards"},
                   {DatasetType::Hf, "hf"}, {DatasetType::Synthetic, "synthetic"})
// Auto: the kind read from tokenizer_path (byte when it is empty); the others are checked against
// it.
enum class TokenizerType { Auto, Byte, SentencePiece, HuggingFace };
GEMMAX_VALUE_NAMES(TokenizerType, {TokenizerType::Auto, "auto"}, {TokenizerType::Byte, "byte"},
                   {TokenizerType::SentencePiece, "sentencepiece"},
                   {TokenizerType::HuggingFace, "huggingface"})
enum class PackingType { Sequential, FirstFit };
GEMMAX_VALUE_NAMES(PackingType, {PackingType::Sequential, "sequential"},
                   {PackingType::FirstFit, "first_fit"})

}  // namespace gemmax
