#include "gemmax/train/memory_plan.h"

#include <iomanip>
#include <sstream>

#include "gemmax/backend/planning_backend.h"
#include "gemmax/base/strings.h"
#include "gemmax/model/params.h"
#include "gemmax/train/fsdp_memory_estimate.h"
#include "gemmax/train/step.h"

namespace gemmax {
namespace {

// What the static categories hold, for the printed plan.
std::vector<MemoryPlan::Item> static_items(const MemoryPlanInput& in, const ParamTable& table,
                                           const std::vector<bool>& trainable) {
  int64_t trained = 0;
  for (size_t i = 0; i < trainable.size(); ++i)
    trained += trainable[i] ? table.specs()[i].numel() : 0;
  const int64_t w = int64_t(dtype_size(in.weight)), n = table.total();
  const std::string wname(dtype_name(in.weight));
  const std::string count = std::to_string(n) + " x " + wname;
  return {{MemKind::Params, "master weights: " + count, n * w},
          {MemKind::Grads, "gradients: " + count, n * w},
          {MemKind::OptState,
           "Adam mu and nu: 2 x " + std::to_string(trained) + " x " + wname +
               (trained < n ? " (trained parameters only)" : ""),
           2 * trained * w}};
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in, Backend& backend) {
  if (in.fsdp > 1) return estimate_fsdp_memory(in);
  PlanningBackend planner(backend);
  MemoryTracker& mem = planner.tracker();
  // The trainer's setup, then one step, on the planner.
  mem.set_phase("setup");
  Gemma4Model model(in.model, planner, in.options);
  const ParamTable& table = model.params();
  const std::vector<bool> trainable = trainable_params(table, in.freeze);
  TrainState state = make_train_state(planner, table, trainable, in.weight, AdamWConfig{});
  mem.reset_peaks();
  const StepInputs inputs = alloc_step_inputs(planner, in.batch, in.seq);
  train_step(planner, model, state, inputs, 0.0, 1);

  MemoryPlan plan;
  plan.input = in;
  for (size_t k = 0; k < kNumMemKinds; ++k) {
    plan.peak[k] = int64_t(mem.peak(MemKind(k)));
    plan.peak_phase[k] = mem.peak_phase(MemKind(k));
  }
  plan.peak_total = int64_t(mem.peak_total());
  plan.total_phase = mem.peak_total_phase();
  plan.items = static_items(in, table, trainable);
  return plan;
}

std::string format_memory_plan(const MemoryPlan& plan, const MemoryTracker* measured) {
  const MemoryPlanInput& in = plan.input;
  const ModelOptions& o = in.options;
  std::ostringstream os;
  os << "memory plan per device" << (plan.estimate ? " (estimate)" : "") << ": " << in.model.name
     << " | batch " << in.batch << " x seq " << in.seq << " | dtype " << dtype_name(o.act)
     << ", weights " << dtype_name(in.weight) << " | remat " << remat_policy_name(o.remat)
     << " | num_vocab_tiling " << o.num_vocab_tiling;
  if (in.fsdp > 1) os << " | FSDP over " << in.fsdp << " devices";
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
    if (k == MemKind::Workspace && !plan.workspace_by_phase.empty())
      os << "      by phase: " << plan.workspace_by_phase << "\n";
  }
  row("total", double(plan.peak_total), measured ? double(measured->peak_total()) : 0.0);
  os << "      (peaks in the " << plan.total_phase << ")\n";
  return os.str();
}

}  // namespace gemmax
