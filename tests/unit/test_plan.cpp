// The accelerator rows and the one rule that resolves runtime.accelerator
// on a machine's facts.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "accel/plan/accelerator.h"
#include "accel/util/errors.h"

using accel::Json;
using namespace accel::plan;

namespace {

MachineFacts facts(int gpus, int cores = 4) {
  MachineFacts f;
  f.cores = cores;
  f.devices["cuda"] = gpus;
  return f;
}

}  // namespace

TEST_CASE("accelerator rows: auto is the machine's GPU where it has one and the host where not, a named row is itself") {
  CHECK(resolve_accelerator("auto", facts(0)).kind == "cpu");
  CHECK(resolve_accelerator("auto", facts(2)).kind == "cuda");
  CHECK(resolve_accelerator("cpu", facts(2)).kind == "cpu");
  // Named, a row is itself whether or not the machine has one: that is the run's own check.
  CHECK(resolve_accelerator("cuda", facts(0)).kind == "cuda");
  CHECK_THROWS_WITH_AS(resolve_accelerator("tpu", facts(0)),
                       doctest::Contains("runtime.accelerator: unknown accelerator \"tpu\" (one of \"cpu\", \"cuda\""),
                       accel::ConfigError);
  // A record read from a file never fails on a name: older or foreign ones read as cpu.
  CHECK(accelerator_kind_of("tpu", facts(2)) == "cpu");
  CHECK(accelerator_kind_of("auto", facts(2)) == "cuda");
  const auto choices = accelerator_choices();
  CHECK(choices.front() == "cpu");
  CHECK(choices.back() == "auto");
  CHECK(std::count(choices.begin(), choices.end(), "cuda") == 1);
  const auto* cpu = find_accelerator("cpu");
  const auto* cuda = find_accelerator("cuda");
  REQUIRE(cpu != nullptr);
  REQUIRE(cuda != nullptr);
  CHECK(cpu->host);
  CHECK(cpu->backend == "gloo");
  CHECK_FALSE(cpu->graphs);
  CHECK_FALSE(cuda->host);
  CHECK(cuda->backend == "nccl");
  CHECK(cuda->graphs);
  CHECK(find_accelerator("auto") == nullptr);
  // A device a run recorded names its row before its index.
  CHECK(accelerator_of_device("cuda:0") == cuda);
  CHECK(accelerator_of_device("cpu") == cpu);
  CHECK(accelerator_of_device("tpu:1") == nullptr);
}

TEST_CASE("accelerator rows: a machine's facts come from an env block, missing fields as a machine without them") {
  const auto f = facts_from_env(Json{{"cores", 8}, {"gpu_count", 2}, {"cpu_features", {"avx2", "avx512_bf16"}}});
  CHECK(f.cores == 8);
  CHECK(f.devices_of("cuda") == 2);
  CHECK(f.devices_of("cpu") == 1);
  CHECK(f.cpu.avx2);
  CHECK(f.cpu.native_bf16());
  const auto none = facts_from_env(Json::object());
  CHECK(none.cores == 1);
  CHECK(none.devices_of("cuda") == 0);
  CHECK_FALSE(none.cpu.avx2);
  // Doctored counts are bounded, never wrapped.
  CHECK(facts_from_env(Json{{"gpu_count", -3}, {"cores", 1e300}}).devices_of("cuda") == 0);
}

TEST_CASE("accelerator rows: a row added in a test file alone is a choice that auto resolves to where the machine has it") {
  AcceleratorRow toy;
  toy.kind = "toy";
  toy.summary = "a toy device for this test";
  toy.backend = "gloo";
  toy.memory_record = "none";
  add_accelerator(toy);
  struct TakeBack {  // the registry is the process's: other cases must not see the toy
    ~TakeBack() { remove_accelerator("toy"); }
  } take_back;
  CHECK_THROWS_AS(add_accelerator(toy), accel::ConfigError);  // one row a kind
  const auto choices = accelerator_choices();
  CHECK(std::find(choices.begin(), choices.end(), "toy") != choices.end());
  MachineFacts f = facts(0);
  CHECK(resolve_accelerator("auto", f).kind == "cpu");
  f.devices["toy"] = 2;
  CHECK(resolve_accelerator("auto", f).kind == "toy");
  // cuda comes first in the registry: a machine with both runs auto on it.
  f.devices["cuda"] = 1;
  CHECK(resolve_accelerator("auto", f).kind == "cuda");
  CHECK(resolve_accelerator("toy", facts(0)).kind == "toy");
  const auto* cuda = find_accelerator("cuda");  // rows stay where they are as rows come and go
  add_accelerator(AcceleratorRow{"toy2", "", "gloo"});
  CHECK(find_accelerator("cuda") == cuda);
  remove_accelerator("toy2");
  CHECK(find_accelerator("toy2") == nullptr);
}

// ---- the run plan ----------------------------------------------------------------

#include "accel/plan/run_plan.h"

namespace {

accel::config::RunConfig config_of(const Json& doc) { return accel::config::to_run_config(doc); }

}  // namespace

TEST_CASE("run plan: devices auto, threads, strategy auto and the knobs resolve once from the config and the machine") {
  auto cfg = config_of(Json{{"runtime", {{"devices", "auto"}, {"accelerator", "auto"}, {"precision", "bf16-mixed"}}}});
  // A GPU machine: every GPU a rank, ddp, NCCL, a small first bucket, bf16 collectives.
  const auto gpu = plan_run(cfg, facts(4, 16));
  CHECK(gpu.kind() == "cuda");
  CHECK(gpu.backend == "nccl");
  CHECK(gpu.dims.ranks_per_node == 4);
  CHECK(gpu.dims.nodes == 1);
  CHECK(gpu.dims.dp == 4);
  CHECK(gpu.dims.tp == 1);
  CHECK(gpu.world() == 4);
  CHECK(gpu.threads == 4);  // 16 cores over 4 local ranks
  CHECK(gpu.strategy->name == "ddp");
  CHECK(gpu.knobs.small_first_bucket);
  CHECK(gpu.knobs.comm_dtype == "bf16");
  CHECK(gpu.precision.row->name == "bf16-mixed");
  CHECK(gpu.precision.grad_bytes == 4);  // fp32 parameters
  CHECK(gpu.precision.comm_bytes == 2);
  CHECK_FALSE(gpu.precision.emulated);  // a device's own units
  CHECK(gpu.family != nullptr);
  CHECK(gpu.dataset != nullptr);
  // The same config on a CPU machine without AVX512-BF16: one rank, gloo, the
  // first bucket as large as the others, bf16 emulated and said so.
  const auto cpu = plan_run(cfg, facts(0, 2));
  CHECK(cpu.kind() == "cpu");
  CHECK(cpu.backend == "gloo");
  CHECK(cpu.world() == 1);
  CHECK(cpu.threads == 2);
  CHECK(cpu.strategy->name == "single");
  CHECK_FALSE(cpu.knobs.small_first_bucket);
  CHECK(cpu.precision.emulated);
  CHECK(cpu.precision.support() == "emulated");
  REQUIRE(cpu.warnings.size() == 1);
  CHECK(cpu.warnings[0].find("bf16-mixed is emulated on this CPU") != std::string::npos);
  // A one-rank strategy keeps devices auto at one rank, even on a GPU machine.
  cfg.runtime.strategy = "single";
  CHECK(plan_run(cfg, facts(4, 16)).world() == 1);
  // Named devices, nodes and threads are the config's; true precisions carry their own dtype.
  auto two = config_of(Json{{"runtime", {{"devices", 2}, {"num_nodes", 3}, {"threads", 1}, {"precision", "32-true"},
                                          {"strategy", "fsdp"}, {"fsdp_sharding", "SHARD_GRAD_OP"},
                                          {"bucket_mb", 5}}}});
  const auto p = plan_run(two, facts(0, 8));
  CHECK(p.world() == 6);
  CHECK(p.dims.dp == 6);
  CHECK(p.threads == 1);
  CHECK(p.strategy->name == "fsdp");
  CHECK(p.knobs.fsdp_sharding == "SHARD_GRAD_OP");
  CHECK(p.knobs.bucket_mb == 5);
  CHECK(p.knobs.comm_dtype == "fp32");
  CHECK(p.precision.comm_bytes == 4);
}

TEST_CASE("run plan: a one-rank strategy on several ranks is refused naming runtime.strategy") {
  // The schema refuses it in a config; a config built in code meets the plan's own check.
  auto cfg = config_of(Json{{"runtime", {{"strategy", "single"}}}});
  cfg.runtime.devices = 2;
  CHECK_THROWS_WITH_AS(plan_run(cfg, facts(0)), doctest::Contains("runtime.strategy: \"single\" runs one process"),
                       accel::ConfigError);
}

TEST_CASE("run plan: fault injection is a warning of the plan and the plan is recorded as JSON") {
  auto cfg = config_of(Json{{"train", {{"inject_delay", 0.15}}}});
  const auto p = plan_run(cfg, facts(0));
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == "fault injection: every training step is delayed by 15% of its own time (train.inject_delay 0.15)");
  const Json j = plan_json(p);
  CHECK(j["accelerator"] == "cpu");
  CHECK(j["strategy"] == "single");
  CHECK(j["world"]["dp"] == 1);
  CHECK(j["precision"]["name"] == "32-true");
  CHECK(j["precision"]["support"] == "native");
  CHECK(j["knobs"]["bucket_mb"] == 25.0);
  CHECK(j["family"] == cfg.model.arch);
  CHECK(j["dataset"] == cfg.data.dataset);
  CHECK(j["warnings"].size() == 1);
  // A runtime-only plan (Fabric's, a bench's) has no family or dataset.
  const Json r = plan_json(plan_runtime(cfg.runtime, facts(0)));
  CHECK(r["family"].is_null());
  CHECK(r["dataset"].is_null());
}

TEST_CASE("run plan: a toy accelerator row is resolved by the plan with its own backend and capabilities") {
  AcceleratorRow toy;
  toy.kind = "toyplan";
  toy.summary = "a test's device";
  toy.backend = "toyccl";
  toy.pinned_memory = true;
  add_accelerator(toy);
  MachineFacts f = facts(0, 8);
  f.devices["toyplan"] = 2;
  auto cfg = config_of(Json::object());
  cfg.runtime.accelerator = "toyplan";
  cfg.runtime.devices = 0;  // auto: every toy device
  cfg.runtime.precision = "bf16-mixed";
  const auto p = plan_run(cfg, f);
  CHECK(p.kind() == "toyplan");
  CHECK(p.backend == "toyccl");
  CHECK(p.world() == 2);
  CHECK(p.threads == 4);
  CHECK(p.strategy->name == "ddp");
  CHECK(p.knobs.small_first_bucket);
  CHECK_FALSE(p.precision.emulated);  // not the host: its own units, whatever the CPU
  remove_accelerator("toyplan");  // p's row pointer dangles from here
}

TEST_CASE("run plan: a recorded run's config reads typed through today's schema on the machine its env describes") {
  // A config of fields an older accel-bench wrote: the rest take today's defaults.
  const Json config = {{"train", {{"batch_size", 12}}},
                       {"runtime", {{"accelerator", "auto"}, {"devices", "auto"}, {"strategy", "fsdp"},
                                    {"precision", "bf16-mixed"}, {"bucket_mb", 5}}}};
  const auto rec = plan_of_record(config, Json{{"cores", 8}, {"gpu_count", 2}}, "old/result.json");
  CHECK(rec.config.train.batch_size == 12);
  CHECK(rec.config.train.log_every == accel::config::to_run_config(Json::object()).train.log_every);
  CHECK(rec.plan.kind() == "cuda");
  CHECK(rec.plan.world() == 2);
  CHECK(rec.plan.strategy->name == "fsdp");
  CHECK(rec.plan.knobs.bucket_mb == 5);
  CHECK(rec.plan.knobs.comm_dtype == "bf16");
  // Without an env the machine has no GPU.
  CHECK(plan_of_record(config, Json(), "old/result.json").plan.kind() == "cpu");
  CHECK_THROWS_WITH_AS(plan_of_record(Json{{"runtime", {{"precision", "fp8"}}}}, Json(), "bad/result.json"),
                       doctest::Contains("bad/result.json: its config does not read"), accel::ConfigError);
  CHECK_THROWS_WITH_AS(plan_of_record(Json(), Json(), "none/result.json"),
                       doctest::Contains("none/result.json: no resolved config"), accel::ConfigError);
}
