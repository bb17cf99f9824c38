// A Hugging Face model folder's weights: one `model.safetensors`, or shards
// `model-00001-of-0000N.safetensors` listed by `model.safetensors.index.json`
// ({"metadata": {"total_size": bytes}, "weight_map": {tensor name: shard file}}).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gemmax/io/safetensors.h"

namespace gemmax {

inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

class HfCheckpoint {
 public:
  // Opens `dir`: the index and its shards if the index exists, else model.safetensors. Checks
  // that every shard exists and holds every tensor the index assigns to it. Throws
  // gemmax::Error naming the folder, file and tensor.
  static HfCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  // dtype, shape and byte range of a tensor; throws naming the folder if absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::string& shard_of(const std::string& name) const;  // file name within dir()
  // Zero-copy view (see SafetensorsFile::tensor), and a converted owned copy.
  Tensor tensor(const std::string& name) const;
  Tensor read_as(const std::string& name, DType dtype, MemKind kind = MemKind::Workspace) const;

 private:
  size_t shard_index(const std::string& name) const;

  std::string dir_;
  bool sharded_ = false;
  std::vector<std::string> shard_names_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> where_;  // tensor name -> shard
};

// Writes `tensors` into `dir` (created if missing) the way transformers' save_pretrained does:
// one model.safetensors if the data fits in `max_shard_bytes`, else shards of at most that
// many data bytes (a larger tensor gets a shard of its own), in the given tensor order, plus
// the index. Each shard has __metadata__ {"format": "pt"} (transformers requires it) plus
// `metadata`. Files are written atomically; the index (the mark of a complete sharded
// checkpoint) is removed first and written last, so a crash never leaves a folder that looks
// complete but mixes old and new shards. Stale files of a previous checkpoint in the same
// layout (model.safetensors, model-*-of-*.safetensors, the index) are removed.
void write_hf_checkpoint(const std::string& dir, const NamedTensors& tensors,
                         uint64_t max_shard_bytes, const StringMap& metadata = {});

// "model-00002-of-00005.safetensors"
std::string hf_shard_name(int index, int count);

}  // namespace gemmax
