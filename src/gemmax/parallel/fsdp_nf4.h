// QLoRA under FSDP: the NF4 base (model/lora/nf4_base.h) sharded over the ranks. Each rank holds
// 1/N of every layer's codes and absmax; as a layer runs its pieces are all-gathered (uint8 and
// float32: a quarter of the bytes the bf16 base of a LoRA run moves), dequantised to the compute
// dtype, and the gathered codes freed. Nothing is reduce-scattered: the base is frozen, and the
// adapters' gradients are all-reduced by the step (train/step.cc). The dense part (embedding
// tables, vectors) is whole on every rank, so the lookup and the head run on the rank's own tokens,
// as they do with fsdp_embedding=gather, without moving the table.
#pragma once

#include "gemmax/model/lora/nf4_base.h"
#include "gemmax/parallel/comm.h"

namespace gemmax {

class FsdpNf4Params final : public Nf4Params {
 public:
  FsdpNf4Params(Backend& be, Comm& comm, const ParamTable& table, const ModelOptions& opt,
                const Nf4Base& base);

 protected:
  void group_whole(int g, Tensor& codes, Tensor& absmax) override;

 private:
  Comm& comm_;
};

}  // namespace gemmax
