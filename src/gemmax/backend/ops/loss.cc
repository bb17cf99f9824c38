#include "gemmax/backend/ops/loss.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {
namespace {

void check_vocab_ce(const char* op, const Tensor& logits, const Tensor& stats,
                    const Tensor& targets) {
  const int64_t R = logits.dim(0);
  GEMMAX_CHECK(stats.dtype() == DType::F64 && stats.numel() == 3 * R &&
                   (!targets.defined() || targets.numel() == R),
               op, ": logits ", logits.str(), " stats ", stats.str(), " targets ",
               op_check::str_or(targets, "-"));
}

}  // namespace

// Target ids are data: each backend checks their range where it reads them.
void validate(const SoftcapCrossEntropyArgs& args) {
  const auto& [logits, loss, targets, mask, cap, grad_scale, write_grad] = args;
  GEMMAX_CHECK(
      logits.ndim() == 2 && targets.numel() == logits.dim(0) && mask.numel() == logits.dim(0),
      "softcap_cross_entropy: logits ", logits.str(), " targets ", targets.str(), " mask ",
      mask.str());
}

void validate(const VocabCeMaxArgs& args) {
  check_vocab_ce("vocab_ce_max", args.logits, args.stats, kNoTensor);
}

void validate(const VocabCeSumsArgs& args) {
  check_vocab_ce("vocab_ce_sums", args.logits, args.stats, args.targets);
}

void validate(const VocabCeFinishArgs& args) {
  const auto& [logits, loss, stats, targets, mask, cap, grad_scale, loss_begin, loss_end,
               write_grad] = args;
  check_vocab_ce("vocab_ce_finish", logits, stats, targets);
  const int64_t R = logits.dim(0);
  GEMMAX_CHECK(mask.numel() == R && 0 <= loss_begin && loss_begin <= loss_end && loss_end <= R,
               "vocab_ce_finish: mask ", mask.str(), " loss rows [", loss_begin, ", ", loss_end,
               ") of ", R);
}

}  // namespace gemmax
