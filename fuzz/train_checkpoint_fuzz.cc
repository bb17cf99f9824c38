// The train-checkpoint opener: a step_<N> folder made of the input's three parts (state.json,
// params.safetensors, optimizer.safetensors, separated by "\n--file--\n"; the same two parts are
// also written as the files of a checkpoint sharded over one rank, which a state.json with
// "ranks": 1 opens), opened as a resumed run or `gemmax export` opens it, then its config, data
// state and tensors used.
//
// The first byte of the input selects the mode: odd = write state.json as given; even = first
// replace its files' sizes and CRC-32s by the real ones (when it is a JSON object with a
// "files" object), so that mutations get past the digest check into the rest of the opener.
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/config/config.h"
#include "gemmax/config/run_config.h"
#include "gemmax/data/loader.h"
#include "gemmax/checkpoint/train_checkpoint.h"

namespace {

constexpr const char* kShardParams = "params.rank00000-of-00001.safetensors";
constexpr const char* kShardOptimizer = "optimizer.rank00000-of-00001.safetensors";

nlohmann::json digest(std::string_view bytes) {
  const uLong crc =
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size()));
  return {{"bytes", bytes.size()}, {"crc32", uint32_t(crc)}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmax;
  if (size == 0) return 0;
  const bool fix_digests = (data[0] & 1) == 0;
  const auto parts = fuzz::split_input(fuzz::as_view(data + 1, size - 1), "\n--file--\n", 3);
  const std::string_view params = parts.size() > 1 ? parts[1] : "";
  const std::string_view optimizer = parts.size() > 2 ? parts[2] : "";
  std::string state(parts[0]);
  if (fix_digests) {
    nlohmann::json j = nlohmann::json::parse(state, nullptr, false);
    if (j.is_object() && j.contains("files") && j["files"].is_object()) {
      j["files"]["params.safetensors"] = digest(params);
      j["files"]["optimizer.safetensors"] = digest(optimizer);
      j["files"][kShardParams] = digest(params);
      j["files"][kShardOptimizer] = digest(optimizer);
      state = j.dump();
    }
  }
  const std::string dir = (fuzz::scratch_dir() / "checkpoints" / "step_00000001").string();
  fuzz::write_scratch("checkpoints/step_00000001/state.json", state);
  fuzz::write_scratch("checkpoints/step_00000001/params.safetensors", params);
  fuzz::write_scratch("checkpoints/step_00000001/optimizer.safetensors", optimizer);
  // The same parts as the files of a checkpoint sharded over one rank ("ranks": 1).
  fuzz::write_scratch(std::string("checkpoints/step_00000001/") + kShardParams, params);
  fuzz::write_scratch(std::string("checkpoints/step_00000001/") + kShardOptimizer, optimizer);
  try {
    (void)find_train_checkpoint((fuzz::scratch_dir() / "checkpoints").string());
    const TrainCheckpoint ckpt = open_train_checkpoint(dir);
    for (const CheckpointTensors* t : {&ckpt.params, &ckpt.optimizer})
      for (const std::string& name : t->names()) {
        try {  // a piece of an unsupported dtype is an error of its own tensor only
          (void)t->read_as(name, DType::F32);
        } catch (const Error&) {
        }
      }
    // What a resumed run does with the rest: its config, and the data position (synthetic data
    // checks the type and seed; the other loaders read the same keys).
    try {
      const Config config = Config::from_json(ckpt.state.at("config"), dir + "/state.json");
      (void)model_config_from(config);
    } catch (const Error&) {
    }
    DataOptions o;
    o.dataset_type = "synthetic";
    o.batch = 1;
    o.seq = 4;
    o.vocab_size = 16;
    make_data_loader(o)->restore(ckpt.state.at("data"));
  } catch (const Error&) {
  }
  return 0;
}
