// Token shards: pre-tokenized documents in one flat binary file (format in docs/DATA.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemmax {

inline constexpr char kShardMagic[8] = {'G', 'M', 'X', 'T', 'O', 'K', 'E', 'N'};
// Version 1: tokens only, every token counts in the loss. Version 2: the tokens, then one loss-mask
// byte per token (1: counted with sft_train_on_completion_only=true, 0: context only).
inline constexpr uint32_t kShardVersion = 2;
inline constexpr uint32_t kShardDtypeUint32 = 1;     // the only token dtype so far
inline constexpr uint32_t kShardNoId = 0xFFFFFFFFu;  // bos/pad field when the tokenizer has none
inline constexpr size_t kShardHeaderBytes = 64;

// The header's fields, in file order (the reserved tail is not kept).
struct ShardHeader {
  uint32_t version = 1;
  uint32_t dtype = kShardDtypeUint32;
  uint64_t num_tokens = 0;
  uint64_t num_documents = 0;  // = number of eos tokens
  uint32_t vocab_size = 0;     // of the tokenizer that wrote the shard
  uint32_t eos_id = 0;
  uint32_t bos_id = kShardNoId;
  uint32_t pad_id = kShardNoId;
};

// Writes documents as `[bos] tokens eos` to `<path>.tmp-<pid>`, and renames it to `path` in
// finish(), so that a crash never leaves a half-written shard under the real name.
class ShardWriter {
 public:
  // bos_id/pad_id < 0: the tokenizer has none.
  ShardWriter(std::string path, int64_t vocab_size, int32_t eos_id, int32_t bos_id, int32_t pad_id);
  ~ShardWriter();  // removes the temporary file when finish() was not reached
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Every id must be in [0, vocab_size). Prepends bos when add_bos (and the tokenizer has one).
  // `mask` (one 0/1 per id, or empty: every token counts): which ids count in the loss under
  // sft_train_on_completion_only; then bos does not count, and eos counts as the last id does (a
  // completion's end is learnt with it). The shard is version 2 if any document has a mask (the
  // mask is kept in memory, one byte per token from the first masked document on), else 1.
  void add_document(std::span<const int32_t> ids, bool add_bos,
                    std::span<const uint8_t> mask = {});
  void finish();

  uint64_t num_tokens() const { return header_.num_tokens; }
  uint64_t num_documents() const { return header_.num_documents; }

 private:
  void write_raw(const void* data, size_t bytes);
  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  ShardHeader header_;
  std::vector<uint8_t> mask_;  // version 2: written after the tokens by finish()
  bool masked_ = false;         // a document came with a mask: version 2
};

// A shard opened for reading: memory-mapped, header validated against the file size.
class TokenShard {
 public:
  explicit TokenShard(std::string path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  std::span<const uint32_t> tokens() const { return {tokens_, size_t(header_.num_tokens)}; }
  // Version 2: one 0/1 byte per token; version 1: empty (every token counts).
  std::span<const uint8_t> loss_mask() const {
    return mask_ ? std::span<const uint8_t>(mask_, size_t(header_.num_tokens))
                 : std::span<const uint8_t>();
  }

  // Checks every token against the model's vocabulary and the document count against the
  // header; throws Error naming the shard, the token index and the id.
  void validate_tokens(int64_t model_vocab_size) const;

 private:
  void validate_header(uint64_t file_bytes);
  std::string path_;
  ShardHeader header_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint32_t* tokens_ = nullptr;
  const uint8_t* mask_ = nullptr;
};

// Throws unless every id is < vocab_size and the tokenizer that made the ids has no larger a
// vocabulary (`writer_vocab`, > 0 when known): such a tokenizer does not match the model even
// where these ids happen to fit. `what` names the data ("token shard 'x.bin'").
void check_token_ids(std::string_view what, std::span<const uint32_t> ids, int64_t vocab_size,
                     int64_t writer_vocab);

}  // namespace gemmax
