#include "gemmax/train/memory_plan.h"

#include <iomanip>
#include <sstream>

#include "gemmax/backend/planning_backend.h"
#include "gemmax/base/strings.h"
#include "gemmax/model/params.h"
#include "gemmax/parallel/planning_comm.h"
#include "gemmax/train/step.h"

namespace gemmax {
namespace {

// What the static categories hold, for the printed plan.
std::vector<MemoryPlan::Item> static_items(const MemoryPlanInput& in, const ParamTable& table,
                                           const ShardLayout& layout,
                                           const std::vector<bool>& trainable) {
  int64_t trained = 0, whole_trained = 0;
  for (size_t i = 0; i < trainable.size(); ++i) {
    trained += trainable[i] ? layout.pieces[i].count : 0;
    whole_trained += trainable[i] ? table.specs()[i].numel() : 0;
  }
  const int64_t w = int64_t(dtype_size(in.weight)), n = layout.local_total;
  const std::string wname(dtype_name(in.weight));
  std::string count = std::to_string(n) + " x " + wname;
  if (layout.sharded())
    count += str_cat(" (rank's shard: ", layout.groups.size(), " pieces of 1/", layout.ranks,
                     ", padding included, + ", layout.replicated, " replicated)");
  return {{MemKind::Params, "master weights: " + count, n * w},
          {MemKind::Grads, "gradients: " + count, n * w},
          {MemKind::OptState,
           "Adam mu and nu: 2 x " + std::to_string(trained) + " x " + wname +
               (whole_trained < table.total() ? " (trained parameters only)" : ""),
           2 * trained * w}};
}

// A LoRA run's: the frozen base, and the adapters' weights, gradients and moments.
std::vector<MemoryPlan::Item> lora_items(const MemoryPlanInput& in, const AdapterTable& adapters,
                                         const TrainState& state) {
  const int64_t n = adapters.params().total(), w = int64_t(dtype_size(in.weight));
  const std::string count =
      str_cat(n, " x ", dtype_name(in.weight), " (", adapters.targets().size(),
              " matrices at rank ", adapters.shape().rank, ")");
  std::vector<MemoryPlan::Item> items;
  if (const auto& q = state.base.nf4) {
    const std::string act(dtype_name(in.options.act));
    items = {
        {MemKind::Params,
         str_cat("frozen base, its matrices in NF4: ", q->layout.code_bytes, " bytes of codes + ",
                 q->layout.blocks, " float32 absmax (blocks of ", q->layout.block, ")",
                 q->layout.ranks > 1 ? str_cat(" (rank's pieces of 1/", q->layout.ranks,
                                               " of each layer's, padding included)")
                                     : std::string()),
         int64_t(q->codes.nbytes() + q->absmax.nbytes())},
        {MemKind::Params,
         str_cat("frozen base, the rest (embedding tables, vectors): ", q->layout.dense_total,
                 " x ", act),
         int64_t(q->dense.nbytes())}};
  } else {
    const ShardLayout& layout = state.base.layout;
    std::string frozen =
        str_cat("frozen base: ", layout.local_total, " x ", dtype_name(state.base.weights.dtype()));
    if (layout.sharded())
      frozen += str_cat(" (rank's shard: ", layout.groups.size(), " pieces of 1/", layout.ranks,
                        ", padding included, + ", layout.replicated, " replicated)");
    items = {{MemKind::Params, frozen, int64_t(state.base.weights.nbytes())}};
  }
  items.insert(items.end(),
               {{MemKind::Params, "adapters: " + count, n * w},
                {MemKind::Grads, "adapters' gradients: " + count, n * w},
                {MemKind::OptState, "Adam mu and nu of the adapters: 2 x " + count, 2 * n * w}});
  return items;
}

// The host-side collectives with which each rank learns what the step needs of the other ranks'
// batches (upload_sharded_batch), so that the plan counts their bytes too.
void plan_batch_collectives(Comm& comm, const FsdpOptions& opt, int64_t tokens) {
  MemoryTracker scratch;
  auto t = [&](int64_t n, DType dt) {
    return Tensor::planned({n}, dt, MemKind::Workspace, scratch);
  };
  const int64_t N = comm.size();
  comm.all_gather(t(1, DType::I64), t(N, DType::I64)).wait();
  if (gathers_batch_tokens(opt, N))
    for (int k = 0; k < 3; ++k)
      comm.all_gather(t(tokens, DType::I32), t(N * tokens, DType::I32)).wait();
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in, Backend& backend) {
  PlanningBackend planner(backend);
  PlanningComm comm(int(in.fsdp));
  MemoryTracker& mem = planner.tracker();
  // The trainer's setup, then one step, on the planner.
  mem.set_phase("setup");
  Gemma4Model model(in.model, planner, in.options);
  const ParamTable& table = model.params();
  const std::vector<bool> trainable = trainable_params(table, in.freeze);
  std::optional<AdapterTable> adapters;
  if (in.lora) adapters.emplace(table, *in.lora);
  TrainState state = adapters
                         ? make_lora_train_state(planner, table, *adapters, in.options.act,
                                                 in.weight, AdamWConfig{}, &comm, in.fsdp_options,
                                                 in.lora->qtype, in.lora->nf4_block)
                         : make_train_state(planner, table, trainable, in.weight, AdamWConfig{},
                                            &comm, in.fsdp_options);
  mem.reset_peaks();
  const CommStats before = comm.stats();
  if (state.sharded()) {
    plan_batch_collectives(comm, in.fsdp_options, in.batch * in.seq);
    const ShardedBatch b =
        alloc_sharded_batch(planner, state.model_layout(), in.fsdp_options, in.batch, in.seq);
    train_step(planner, model, state, b.in, 0.0, 1, b.vocab);
  } else {
    const StepInputs inputs = alloc_step_inputs(planner, in.batch, in.seq);
    train_step(planner, model, state, inputs, 0.0, 1);
  }

  MemoryPlan plan;
  plan.input = in;
  for (size_t k = 0; k < kNumMemKinds; ++k) {
    plan.peak[k] = int64_t(mem.peak(MemKind(k)));
    plan.peak_phase[k] = mem.peak_phase(MemKind(k));
  }
  plan.peak_total = int64_t(mem.peak_total());
  plan.total_phase = mem.peak_total_phase();
  plan.items = adapters ? lora_items(in, *adapters, state)
                        : static_items(in, table, state.layout, trainable);
  plan.comm = comm.stats() - before;
  return plan;
}

std::string format_memory_plan(const MemoryPlan& plan, const MemoryTracker* measured) {
  const MemoryPlanInput& in = plan.input;
  const ModelOptions& o = in.options;
  std::ostringstream os;
  os << "memory plan per device: " << in.model.name << " | batch " << in.batch << " x seq "
     << in.seq << " | dtype " << dtype_name(o.act) << ", weights " << dtype_name(in.weight)
     << " | remat " << name_of(o.remat) << " | num_vocab_tiling " << o.num_vocab_tiling;
  if (in.fsdp > 1)
    os << " | FSDP over " << in.fsdp << " ranks (small vectors "
       << (in.fsdp_options.replicate_small ? "replicated" : "sharded") << ", embedding "
       << embedding_mode_name(in.fsdp_options.embedding) << ", prefetch "
       << in.fsdp_options.prefetch << ")";
  os << "\n";
  auto row = [&](const std::string& name, double planned, double meas) {
    os << "  " << std::left << std::setw(14) << name << std::right << std::setw(12)
       << format_bytes(planned);
    if (measured) os << std::setw(14) << format_bytes(meas);
    os << "\n";
  };
  os << "  " << std::left << std::setw(14) << "category" << std::right << std::setw(12)
     << "planned";
  if (measured) os << std::setw(14) << "measured peak";
  os << "\n";
  for (MemKind k : {MemKind::Params, MemKind::Grads, MemKind::OptState, MemKind::Activations,
                    MemKind::Workspace, MemKind::Data}) {
    row(std::string(mem_kind_name(k)), double(plan.peak[size_t(k)]),
        measured ? double(measured->peak(k)) : 0.0);
    for (const auto& i : plan.items)
      if (i.kind == k)
        os << "      " << std::setw(10) << format_bytes(double(i.bytes)) << "  " << i.what << "\n";
    if ((k == MemKind::Activations || k == MemKind::Workspace) &&
        !plan.peak_phase[size_t(k)].empty())
      os << "      (peaks in the " << plan.peak_phase[size_t(k)] << ")\n";
  }
  row("total", double(plan.peak_total), measured ? double(measured->peak_total()) : 0.0);
  os << "      (peaks in the " << plan.total_phase << ")\n";
  if (in.fsdp > 1) {
    const CommStats& c = plan.comm;
    os << "  communication per step and rank: all-gather "
       << format_bytes(double(c.all_gather_bytes)) << ", reduce-scatter "
       << format_bytes(double(c.reduce_scatter_bytes)) << ", all-reduce "
       << format_bytes(double(c.all_reduce_bytes));
    if (c.all_to_all_bytes > 0) os << ", all-to-all " << format_bytes(double(c.all_to_all_bytes));
    os << " (" << c.collectives << " collectives)\n";
  }
  return os.str();
}

}  // namespace gemmax
