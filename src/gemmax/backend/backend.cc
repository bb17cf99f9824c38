#include "gemmax/backend/backend.h"

#include "gemmax/base/error.h"

namespace gemmax {

namespace {
[[noreturn]] void no_vocab_ce(const Backend& be) {
  fail("the ", be.name(),
       " backend has no vocabulary-parallel cross-entropy: ", "set fsdp_embedding=gather");
}
}  // namespace

#define GEMMAX_OP_UNSUPPORTED(name, Args, family) \
  void Backend::do_##name(const Args&, OpDims<Args>) { no_vocab_ce(*this); }
GEMMAX_VOCAB_LOSS_OPS(GEMMAX_OP_UNSUPPORTED)
#undef GEMMAX_OP_UNSUPPORTED

}  // namespace gemmax
