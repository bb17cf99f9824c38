#include "gemmax/io/model_dir.h"

#include "gemmax/io/hf_model.h"
#include "gemmax/model/params.h"

namespace gemmax {

LoadedModel load_model_dir(const std::string& dir, DType dtype, std::ostream* log) {
  // A train checkpoint loader goes here, chosen by what the folder holds.
  const HfModelFolder folder = read_hf_model_folder(dir);
  const ParamTable table(folder.config);
  LoadedModel m;
  m.config = folder.config;
  m.weights = Tensor::empty({table.total()}, dtype, MemKind::Params);
  load_hf_weights(table, folder, m.weights, log);
  m.source = "Hugging Face folder '" + dir + "'";
  return m;
}

}  // namespace gemmax
