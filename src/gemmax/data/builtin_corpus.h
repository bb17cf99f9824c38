// The built-in corpus: English-like documents generated from a small hand-written grammar
// (stories, everyday sentences, arithmetic, counting, lists, facts, dialogues), so that
// `gemmax train` has real text to learn with nothing on disk. No copyrighted text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gemmax {

inline constexpr size_t kBuiltinCorpusBytes = 768 * 1024;
// The held-out part (evaluation): the documents the same generator writes after the training
// ones, up to this many more bytes. Training never sees them.
inline constexpr size_t kBuiltinEvalBytes = 32 * 1024;

// Documents in order until their total size reaches target_bytes. The same seed gives the
// same documents on every machine (only gemmax::Rng is used).
std::vector<std::string> builtin_corpus(uint64_t seed, size_t target_bytes = kBuiltinCorpusBytes);

}  // namespace gemmax
