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
