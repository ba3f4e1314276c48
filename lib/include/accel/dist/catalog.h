// The strategies as plain facts (no LibTorch): what each is called, whether
// it runs on several ranks, the settings it reads, and what one training step
// sends and keeps per rank. The config schema reads runtime.strategy's
// choices from here, the checks its rank rules, `predict` the collective
// schedule it prices, and `tune` the strategies and knobs it searches. A
// strategy is one row of the registry (lib/dist/strategy.cpp, which also
// holds each row's factory: accel/dist/strategy.h), never a name compared
// elsewhere.
#pragma once

#include <string>
#include <vector>

namespace accel::dist {

// The settings of a run that shape a strategy's step: the one struct every
// reader of them shares (the run plan, the strategies, predict, scaling,
// tune). The run plan (accel/plan/run_plan.h) fills it from runtime.* and the
// accelerator and precision rows; nothing copies its fields one by one.
struct StrategyKnobs {
  std::string fsdp_sharding = "FULL_SHARD";  // FULL_SHARD | SHARD_GRAD_OP | NO_SHARD
  bool fsdp_prefetch = true;                 // fsdp: all-gather the next unit ahead
  double bucket_mb = 25.0;                   // ddp: gradient bucket size
  // ddp: the first bucket (the last layers' gradients) capped at 1 MiB, as
  // PyTorch does, so its all-reduce starts early in the backward pass. Worth
  // it where communication runs beside the compute (a device's collectives);
  // on CPU ranks that own every core it only takes cores from the backward
  // (bench/scaling.sh), so there the first bucket is as large as the others.
  bool small_first_bucket = false;
  // fsdp and ZeRO: the dtype of all-gathers and reduce-scatters, as the
  // precision catalog names it ("fp32", "bf16"): the compute dtype under
  // autocast, else the parameters'. Master shards stay in the parameters' dtype.
  std::string comm_dtype = "fp32";
};

// What one step sends and when, and what each rank keeps, as lib/dist issues
// it: `predict` lays these collectives on the step's timeline.
struct StepSchedule {
  enum class Grads {
    None,               // one rank: nothing to reduce
    Buckets,            // all-reduced in buckets as backward produces them (DDP)
    UnitAllReduce,      // each unit's flat gradient all-reduced as its backward ends
    UnitReduceScatter,  // each unit's flat gradient reduce-scattered as its backward ends
  };
  Grads grads = Grads::None;
  bool gather_forward = false;     // every unit's parameters all-gathered before its forward
  bool gather_backward = false;    // and again before its backward (the last unit stays gathered)
  bool gather_after_step = false;  // the stepped shards all-gathered after the optimizer (ZeRO)
  bool split_units = false;        // unit buffers split into N shards (padded to N)
  bool copy_out_slice = false;     // the rank's slice of an all-reduced buffer copied out (ZeRO-1)
  // Model state per rank: each of parameters, gradients and optimizer state
  // whole or a 1/N shard; a sharded optimizer also steps 1/N of the state.
  bool params_sharded = false, grads_sharded = false, optimizer_sharded = false;
  std::string description;  // one line for predict's assumptions
};

// A setting `tune` may vary for a strategy, with the values it tries.
struct StrategyKnob {
  std::string field;                // e.g. "runtime.fsdp_sharding"
  std::vector<std::string> values;  // as JSON text: "\"NO_SHARD\"", "25", "true"
};

struct StrategyInfo {
  std::string name;     // runtime.strategy
  std::string summary;  // one line
  bool one_rank = false;  // runs one process only (single)
  std::vector<StrategyKnob> knobs;
  // The step on several ranks under these settings (unused where one_rank).
  StepSchedule (*schedule)(const StrategyKnobs& knobs) = nullptr;
};

// Every strategy, in registry order.
const std::vector<StrategyInfo>& strategy_catalog();
// nullptr when unknown ("auto" is not a row: resolve it first).
const StrategyInfo* find_strategy(const std::string& name);
// runtime.strategy's choices: "auto" and every row.
std::vector<std::string> strategy_choices();
// The rows that run on several ranks, quoted and comma-joined, for messages:
// "\"ddp\", \"fsdp\", ...".
std::string multi_rank_strategy_list();
// "auto" resolved for `world` ranks: single on one, ddp on several.
std::string resolve_strategy(const std::string& name, int world);
// The row a run of `world` ranks uses for runtime.strategy `name` ("auto"
// resolved); ConfigError naming runtime.strategy for an unknown name or a
// one-rank row on several ranks. The run plan and make_strategy both ask it.
const StrategyInfo& strategy_for_world(const std::string& name, int world);
// Whether `name` (a row or "auto") always runs on several ranks' terms:
// any row but a one-rank one, "auto" not included.
bool is_multi_rank_strategy(const std::string& name);

}  // namespace accel::dist
