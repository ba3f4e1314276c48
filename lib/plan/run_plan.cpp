#include "accel/plan/run_plan.h"

#include <algorithm>
#include <cstdio>

#include "accel/metrics/hardware.h"
#include "accel/util/errors.h"

namespace accel::plan {

namespace {

int dtype_bytes(const std::string& dtype) {
  if (dtype == "fp64") return 8;
  if (dtype == "bf16" || dtype == "fp16") return 2;
  return 4;
}

}  // namespace

RunPlan plan_runtime(const config::RuntimeConfig& rt, const MachineFacts& facts) {
  RunPlan p;
  p.accelerator = &resolve_accelerator(rt.accelerator, facts);
  const auto& row = *p.accelerator;
  p.backend = rt.backend == "auto" ? row.backend : rt.backend;

  // runtime.devices "auto" (0): one rank for a one-rank strategy or on the
  // host, else every device of the accelerator's kind this machine has.
  int local = rt.devices;
  if (local <= 0) {
    const auto* named = dist::find_strategy(rt.strategy);
    local = (named != nullptr && named->one_rank) || row.host ? 1 : std::max(1, facts.devices_of(row.kind));
  }
  p.dims.nodes = std::max(1, rt.num_nodes);
  p.dims.ranks_per_node = local;
  p.dims.dp = p.dims.world();
  p.dims.tp = 1;
  p.threads = rt.threads > 0 ? rt.threads : std::max(1, facts.cores / local);

  p.strategy = &dist::strategy_for_world(rt.strategy, p.world());

  const auto* prec = precision::find_precision(rt.precision);
  if (prec == nullptr) {
    throw ConfigError("runtime.precision: unknown precision \"" + rt.precision + "\"");
  }
  p.precision.row = prec;
  p.knobs.fsdp_sharding = rt.fsdp_sharding;
  p.knobs.fsdp_prefetch = rt.fsdp_prefetch;
  p.knobs.bucket_mb = rt.bucket_mb;
  p.knobs.small_first_bucket = !row.host;  // collectives beside the compute
  p.knobs.comm_dtype = prec->autocast ? prec->compute : prec->params;
  p.precision.grad_bytes = dtype_bytes(prec->params);
  p.precision.comm_bytes = dtype_bytes(p.knobs.comm_dtype);
  // A device runs its low precisions on its own units; the host on its CPU's.
  const auto support = metrics::precision_support(prec->name, row.host ? "cpu" : row.kind, facts.cpu);
  p.precision.emulated = support.emulated();
  p.precision.warning = support.warning;
  if (p.precision.emulated) p.warnings.push_back(support.warning);
  return p;
}

RunPlan plan_run(const config::RunConfig& cfg, const MachineFacts& facts) {
  RunPlan p = plan_runtime(cfg.runtime, facts);
  p.family = models::find_family(cfg.model.arch);
  if (p.family == nullptr) throw ConfigError("model.arch: unknown family \"" + cfg.model.arch + "\"");
  p.dataset = data::find_dataset(cfg.data.dataset);
  if (p.dataset == nullptr) throw ConfigError("data.dataset: unknown dataset \"" + cfg.data.dataset + "\"");
  const auto tasks = train::task_catalog();
  const auto task = std::find_if(tasks.begin(), tasks.end(), [&](const train::TaskInfo& t) { return t.name == cfg.train.task; });
  if (task == tasks.end()) throw ConfigError("train.task: unknown task \"" + cfg.train.task + "\"");
  p.task = *task;
  if (cfg.train.inject_delay > 0) {
    char line[160];
    std::snprintf(line, sizeof(line),
                  "fault injection: every training step is delayed by %g%% of its own time "
                  "(train.inject_delay %g)",
                  cfg.train.inject_delay * 100, cfg.train.inject_delay);
    p.warnings.push_back(line);
  }
  return p;
}

PlannedRecord plan_of_record(const Json& config, const Json& env, const std::string& where) {
  if (!config.is_object()) throw ConfigError(where + ": no resolved config");
  try {
    PlannedRecord r;
    r.config = config::to_run_config(config::resolve_config(config, "."));
    r.plan = plan_run(r.config, facts_from_env(env));
    return r;
  } catch (const ConfigError& e) {
    throw ConfigError(where + ": its config does not read through this accel-bench's config schema (" + e.what() + ")");
  }
}

Json plan_json(const RunPlan& p) {
  Json j = {{"accelerator", p.kind()},
            {"backend", p.backend},
            {"world", {{"nodes", p.dims.nodes}, {"ranks_per_node", p.dims.ranks_per_node},
                       {"dp", p.dims.dp}, {"tp", p.dims.tp}}},
            {"threads", p.threads},
            {"strategy", p.strategy->name},
            {"knobs", {{"fsdp_sharding", p.knobs.fsdp_sharding},
                       {"fsdp_prefetch", p.knobs.fsdp_prefetch},
                       {"bucket_mb", p.knobs.bucket_mb},
                       {"small_first_bucket", p.knobs.small_first_bucket},
                       {"comm_dtype", p.knobs.comm_dtype}}},
            {"precision", {{"name", p.precision.row->name},
                           {"compute", p.precision.row->compute},
                           {"params", p.precision.row->params},
                           {"autocast", p.precision.row->autocast},
                           {"scaler", p.precision.row->scaler},
                           {"support", p.precision.support()}}},
            {"warnings", p.warnings}};
  j["family"] = p.family ? Json(p.family->arch) : Json();
  j["dataset"] = p.dataset ? Json(p.dataset->name) : Json();
  j["task"] = p.task.name.empty() ? Json()
                                  : Json{{"name", p.task.name}, {"metric", p.task.metric},
                                         {"higher_is_better", p.task.higher_is_better},
                                         {"proportion", p.task.proportion}, {"head", p.task.head}};
  return j;
}

}  // namespace accel::plan
