#include "gemmax/config/train_config.h"

#include "gemmax/base/error.h"
#include "gemmax/config/key_value.h"
#include "gemmax/config/run_config.h"
#include "gemmax/config/validate.h"

namespace gemmax {

#define GEMMAX_READ_KEY(Type, field, key, default_value, range, maxtext, help) \
  part.field = key_value::read<Type>(c, #key, help);

ModelConfig model_config_from(const Config& c) {
  ModelConfig part;
  GEMMAX_MODEL_KEYS(GEMMAX_READ_KEY)
  ModelConfig& m = part;
  if (m.global_num_kv_heads == 0) m.global_num_kv_heads = m.num_kv_heads;  // MaxText's 0: as sliding
  if (m.decoder_block == DecoderBlock::Gemma4 &&
      (m.per_layer_input_dim != 0 || m.num_kv_shared_layers != 0 || m.double_wide_mlp))
    fail("decoder_block \"gemma4\" has no per-layer inputs, shared K/V or double-wide MLPs, but "
         "hidden_size_per_layer_input=", m.per_layer_input_dim, " num_kv_shared_layers=",
         m.num_kv_shared_layers, " use_double_wide_mlp=", m.double_wide_mlp ? "true" : "false",
         "; set decoder_block=gemma4_small or those keys to 0/false");
  m.validate();
  return m;
}

TrainConfig train_config_from(const Config& c) {
  validate_run_config(c);
  TrainConfig t;
#define GEMMAX_READ_PART(p, Struct, KEYS) \
  {                                       \
    Struct& part = t.p;                   \
    KEYS(GEMMAX_READ_KEY)                 \
  }
  GEMMAX_KEY_PARTS(GEMMAX_READ_PART)
#undef GEMMAX_READ_PART
  t.model = model_config_from(c);
  // cpu_isa, cpu_kernels' former name, still comes in older run folders' configs and checkpoints.
  if (const std::string& old = t.backend.cpu_isa; !old.empty() && !c.set_by_user("cpu_kernels"))
    t.backend.cpu_kernels = parse_named<CpuKernels>("cpu_isa", old);
  return t;
}

#undef GEMMAX_READ_KEY

}  // namespace gemmax
