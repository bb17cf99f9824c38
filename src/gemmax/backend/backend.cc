#include "gemmax/backend/backend.h"

#include "gemmax/base/error.h"

namespace gemmax {

namespace {
[[noreturn]] void no_vocab_ce(const Backend& be) {
  fail("the ", be.name(),
       " backend has no vocabulary-parallel cross-entropy: ", "set fsdp_embedding=gather");
}
}  // namespace

void Backend::vocab_ce_max(const Tensor&, const Tensor&, double) { no_vocab_ce(*this); }
void Backend::vocab_ce_sums(const Tensor&, const Tensor&, const Tensor&) { no_vocab_ce(*this); }
void Backend::vocab_ce_finish(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, double, double, int64_t, int64_t, bool) {
  no_vocab_ce(*this);
}

}  // namespace gemmax
