#include "gemmax/checkpoint/hf_model.h"

#include <filesystem>
#include <cstring>
#include <set>

#include "gemmax/base/convert.h"
#include "gemmax/base/progress.h"
#include "gemmax/io/hf_checkpoint.h"

namespace gemmax {
namespace fs = std::filesystem;

HfModelFolder read_hf_model_folder(const std::string& dir) {
  if (!fs::is_directory(dir))
    fail("model folder '", dir, "' does not exist (expected a Hugging Face folder with config.json "
         "and model.safetensors)");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path)) fail("model folder '", dir, "' has no config.json");
  HfModelFolder f;
  f.dir = dir;
  f.config = read_hf_config(config_path, &f.info);
  return f;
}

std::string load_hf_weights(const ParamTable& table, const HfModelFolder& folder,
                            const Tensor& flat) {
  GEMMAX_CHECK(flat.numel() == table.total(), "load_hf_weights: buffer ", flat.str(), " for ",
               table.total(), " parameters");
  return for_each_hf_weight(table, folder, flat.dtype(), [&](const ParamSpec& s, const Tensor& t) {
    std::memcpy(flat.flat_slice(s.offset, s.shape).raw(), t.raw(), t.nbytes());
  });
}

std::string for_each_hf_weight(const ParamTable& table, const HfModelFolder& folder, DType dtype,
                               const std::function<void(const ParamSpec&, const Tensor&)>& take) {
  const HfCheckpoint ckpt = HfCheckpoint::open(folder.dir);
  const std::string& prefix = folder.info.weight_prefix;
  std::set<std::string> expected;
  for (const ParamSpec& s : table.specs()) expected.insert(prefix + s.name);

  int64_t skipped = 0;
  std::string skipped_example;
  for (const std::string& name : ckpt.names()) {
    if (name.rfind(prefix, 0) != 0) {
      if (skipped++ == 0) skipped_example = name;
      continue;
    }
    if (!expected.count(name))
      fail("checkpoint '", folder.dir, "' (", ckpt.shard_of(name), ") has tensor '", name,
           "' that a ", table.config().num_layers, "-layer Gemma-4 decoder with this config.json "
           "does not have; check config.json matches the weights");
  }
  // Progress in bytes read from the files.
  double total = 0;
  for (const ParamSpec& s : table.specs())
    if (ckpt.has(prefix + s.name)) total += double(ckpt.entry(prefix + s.name).nbytes());
  Progress progress("loading " + folder.dir, total, "bytes");
  for (const ParamSpec& s : table.specs()) {
    const std::string name = prefix + s.name;
    if (!ckpt.has(name))
      fail("checkpoint '", folder.dir, "' is missing tensor '", name, "' (shape ",
           shape_str(s.shape), ")");
    const SafetensorsEntry& e = ckpt.entry(name);
    if (e.shape != s.shape)
      fail("checkpoint '", folder.dir, "': tensor '", name, "' has shape ", shape_str(e.shape),
           " but config.json implies ", shape_str(s.shape));
    // The mapped file itself where it holds the dtype asked for: no copy of a large table.
    const Tensor src = e.dtype == dtype && e.supported ? ckpt.tensor(name) : ckpt.read_as(name, dtype);
    refuse_nonfinite(src, str_cat("model folder '", folder.dir, "' (", ckpt.shard_of(name),
                                  "): tensor '", name, "'"));
    take(s, src);
    progress.add(double(e.nbytes()));
  }
  progress.finish();
  if (skipped == 0) return "";
  return str_cat("skipped ", skipped, " tensors outside the text decoder (e.g. '",
                 skipped_example, "')");
}

NamedTensors hf_named_tensors(const ParamTable& table, const Tensor& flat,
                              const std::string& prefix, DType dtype) {
  NamedTensors out;
  Progress progress(str_cat("converting to ", dtype_name(dtype)),
                    double(table.total()) * double(dtype_size(dtype)), "bytes");
  for (const ParamSpec& s : table.specs()) {
    out.emplace_back(prefix + s.name, convert_dtype(flat.flat_slice(s.offset, s.shape), dtype));
    progress.add(double(out.back().second.nbytes()));
  }
  progress.finish();
  return out;
}

}  // namespace gemmax
