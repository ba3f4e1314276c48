// A run resolved once (no LibTorch): plan_run reads a typed config and the
// facts of a machine and returns what the run will be there, in the shape of
// Lightning Fabric's connector and torchtitan's trainer setup (parallel
// dimensions plus the train spec): the accelerator row and its process-group
// backend, the world and its parallel dimensions, the strategy row with its
// knobs, the precision row with its support on this accelerator, the family,
// dataset and task rows, and the warnings to print before the run. Fabric,
// the run, the checks, the sweep's plan, and (through plan_of_record)
// predict's base and scaling read it instead of re-deriving any of it from
// runtime.* strings; result.json records it ("plan").
#pragma once

#include <string>
#include <vector>

#include "accel/config/run_config.h"
#include "accel/data/catalog.h"
#include "accel/dist/catalog.h"
#include "accel/models/catalog.h"
#include "accel/plan/accelerator.h"
#include "accel/precision/catalog.h"
#include "accel/train/task.h"
#include "accel/util/json_doc.h"

namespace accel::plan {

// How the world's ranks divide the work (torchtitan's ParallelDims): today
// every rank is a data-parallel rank; tensor parallelism has its dimension,
// 1, until a strategy splits a layer.
struct ParallelDims {
  int nodes = 1;           // runtime.num_nodes
  int ranks_per_node = 1;  // runtime.devices, "auto" resolved
  int dp = 1;              // data-parallel degree: ranks holding a replica or a shard of the model
  int tp = 1;              // tensor-parallel degree
  int world() const { return nodes * ranks_per_node; }
};

// The precision row as it runs on the plan's accelerator.
struct PrecisionPlan {
  const precision::PrecisionInfo* row = nullptr;  // never null in a plan
  // Bytes of one gradient element as the strategies all-reduce it (the
  // parameters' dtype) and of one element of a sharded strategy's
  // collectives (the knobs' comm_dtype).
  int grad_bytes = 4, comm_bytes = 4;
  bool emulated = false;  // a host accelerator whose CPU lacks units for the low dtype
  std::string warning;    // one line where emulated, else ""
  std::string support() const { return emulated ? "emulated" : "native"; }
};

struct RunPlan {
  const AcceleratorRow* accelerator = nullptr;  // never null in a plan
  // The process group's backend: runtime.backend, "auto" as the row's
  // (whether this build has it is the run's own check).
  std::string backend;
  ParallelDims dims;
  int threads = 1;  // intra-op threads a rank: runtime.threads, 0 as the cores over the local ranks
  const dist::StrategyInfo* strategy = nullptr;  // "auto" resolved; never null in a plan
  dist::StrategyKnobs knobs;
  PrecisionPlan precision;
  const models::FamilyInfo* family = nullptr;   // null in a runtime-only plan
  const data::DatasetInfo* dataset = nullptr;   // null in a runtime-only plan
  train::TaskInfo task;                         // train.task's facts (empty name in a runtime-only plan)
  std::vector<std::string> warnings;            // printed before the run, recorded in result.json
  int world() const { return dims.world(); }
  const std::string& kind() const { return accelerator->kind; }  // "cpu", "cuda"
};

// The runtime section alone (Fabric's, a bench's): accelerator, world,
// threads, strategy, knobs and precision; no family, dataset or train
// warnings. ConfigError "runtime.<field>: ..." for what no row has, or a
// one-rank strategy on several ranks.
RunPlan plan_runtime(const config::RuntimeConfig& runtime, const MachineFacts& facts);
// The whole run: plan_runtime, the family, dataset and task rows, and the
// warnings the run prints (an emulated precision, fault injection).
RunPlan plan_run(const config::RunConfig& cfg, const MachineFacts& facts);

// result.json's "plan": the rows by name and the resolved numbers.
Json plan_json(const RunPlan& plan);

// A recorded run read back typed: its resolved config through today's schema
// (fields added since take their defaults), and its plan on the machine its
// env block describes. What predict, scaling and tune read a run's settings
// from, instead of untyped reads with fallbacks of their own. ConfigError
// "WHERE: ..." where today's schema refuses the config or no config is there.
struct PlannedRecord {
  config::RunConfig config;
  RunPlan plan;
};
PlannedRecord plan_of_record(const Json& config, const Json& env, const std::string& where);

}  // namespace accel::plan
