#include "gemmax/backend/ops/loss.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const SoftcapCrossEntropyArgs& args) {}

void validate(const VocabCeMaxArgs& args) {}

void validate(const VocabCeSumsArgs& args) {}

void validate(const VocabCeFinishArgs& args) {}

}  // namespace gemmax
