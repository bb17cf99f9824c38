#include "gemmax/parallel/fsdp_nf4.h"

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"

namespace gemmax {

FsdpNf4Params::FsdpNf4Params(Backend& be, Comm& comm, const ParamTable& table,
                             const ModelOptions& opt, const Nf4Base& base)
    : Nf4Params(be, table, opt, base), comm_(comm) {
  GEMMAX_CHECK(base.layout.ranks == comm.size() && base.layout.rank == comm.rank(),
               "FsdpNf4Params: a base laid out for rank ", base.layout.rank, " of ",
               base.layout.ranks, " on rank ", comm.rank(), " of ", comm.size());
}

void FsdpNf4Params::group_whole(int g, Tensor& codes, Tensor& absmax) {
  const Nf4Layout::Group& group = base_.layout.groups[size_t(g)];
  const int64_t N = comm_.size();
  const std::string what = group.layer >= 0 ? str_cat("layer ", group.layer, "'s NF4 base")
                                            : std::string("the NF4 per-layer projection");
  const Tensor all_codes = be_.alloc({N * group.code_piece}, DType::U8, MemKind::Workspace);
  const Tensor all_absmax = be_.alloc({N * group.scale_piece}, DType::F32, MemKind::Workspace);
  CommRequest c = comm_.all_gather(base_.codes.flat_slice(group.code_local, {group.code_piece}),
                                   all_codes, "all-gather of " + what + " (codes)");
  CommRequest a = comm_.all_gather(base_.absmax.flat_slice(group.scale_local, {group.scale_piece}),
                                   all_absmax, "all-gather of " + what + " (absmax)");
  c.wait();
  a.wait();
  codes = all_codes.flat_slice(0, {group.code_full});
  absmax = all_absmax.flat_slice(0, {group.scale_full});
}

}  // namespace gemmax
