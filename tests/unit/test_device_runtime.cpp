// The accelerator seam (train/device_runtime.h): a toy accelerator added in
// this file alone (a plan row and a device runtime on the meta device type)
// is resolved as a run's device, times steps from its own events, counts a
// step's allocations from its allocator's statistics and captures and
// replays a graphed step, through the same device.h code a GPU run uses.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "accel/plan/accelerator.h"
#include "accel/train/device.h"
#include "accel/train/device_runtime.h"
#include "accel/train/fabric.h"
#include "accel/util/errors.h"

namespace train = accel::train;

namespace {

// What the toy device's runtime was asked, and its state.
struct ToyState {
  double clock_ms = 0;  // the device's clock: each event recorded advances it by 1.5 ms
  int syncs = 0;
  train::AllocatorStats stats;
  int aside = 0, captures = 0, replays = 0;
  bool fail_capture = false;
};
ToyState g_toy;

class ToyEvent final : public train::DeviceEvent {
 public:
  void record() override { at_ = (g_toy.clock_ms += 1.5); }
  void synchronize() override {}
  double elapsed_ms(train::DeviceEvent& later) override { return static_cast<ToyEvent&>(later).at_ - at_; }

 private:
  double at_ = -1;
};

class ToyGraph final : public train::DeviceGraph {
 public:
  void run_aside(const std::function<void()>& body) override {
    ++g_toy.aside;
    body();
  }
  void capture(const std::function<void()>& body) override {
    if (g_toy.fail_capture) throw std::runtime_error("the toy device cannot capture this");
    body();
    ++g_toy.captures;
  }
  void replay() override { ++g_toy.replays; }
};

class ToyRuntime final : public train::DeviceRuntime {
 public:
  std::string kind() const override { return "toy"; }
  c10::DeviceType type() const override { return c10::DeviceType::Meta; }
  int device_count() const override { return 2; }
  void synchronize(int) const override { ++g_toy.syncs; }
  std::optional<train::AllocatorStats> allocator_stats(int) const override { return g_toy.stats; }
  void reset_allocator_peaks(int) const override {
    g_toy.stats.peak_bytes = g_toy.stats.current_bytes;
    g_toy.stats.peak_reserved_bytes = g_toy.stats.current_bytes;
  }
  std::string allocator_name() const override { return "toy allocator"; }
  std::unique_ptr<train::DeviceEvent> make_event(int) const override { return std::make_unique<ToyEvent>(); }
  std::unique_ptr<train::DeviceGraph> make_graph(int) const override { return std::make_unique<ToyGraph>(); }
  bool has_events() const override { return true; }
  bool has_graphs() const override { return true; }
  bool has_allocator_stats() const override { return true; }
};

// Adds the toy row and runtime for one case; the registries are the
// process's, so other cases must not see them.
struct ToyAccelerator {
  ToyAccelerator() {
    g_toy = ToyState{};
    accel::plan::AcceleratorRow row;
    row.kind = "toy";
    row.summary = "a toy device for this test";
    row.backend = "gloo";
    row.graphs = row.events = true;
    row.memory_record = "the toy allocator's peak";
    accel::plan::add_accelerator(row);
    train::add_device_runtime(std::make_unique<ToyRuntime>());
  }
  ~ToyAccelerator() {
    train::remove_device_runtime("toy");
    accel::plan::remove_accelerator("toy");
  }
};

const torch::Device kToy(c10::DeviceType::Meta, 1);

}  // namespace

TEST_CASE("device runtime: the host's is always there and a build has one runtime a device type") {
  const auto runtimes = train::device_runtimes();
  REQUIRE_FALSE(runtimes.empty());
  CHECK(runtimes.front()->kind() == "cpu");
  CHECK(&train::device_runtime(torch::kCPU) == runtimes.front());
  CHECK_FALSE(train::device_runtime(torch::kCPU).has_events());
  CHECK(train::cuda_graphs_compiled() == (train::find_device_runtime("cuda") != nullptr));
  // Every runtime serves a row of the plan's accelerator registry.
  for (const auto* rt : runtimes) CHECK(accel::plan::find_accelerator(rt->kind()) != nullptr);
  CHECK_THROWS_AS(train::device_runtime(c10::DeviceType::Meta), accel::RunError);
  // A runtime serves a plan row: without its row it is refused.
  CHECK_THROWS_AS(train::add_device_runtime(std::make_unique<ToyRuntime>()), accel::RunError);
}

TEST_CASE("device runtime: a toy accelerator added in a test file alone is resolved as the run's device and counted by the machine's facts") {
  ToyAccelerator toy;
  CHECK(train::this_machine_facts("auto").devices_of("toy") == 2);
  CHECK(train::this_machine_facts("cpu").devices_of("toy") == 0);  // the host asks no driver
  CHECK(train::resolve_device("toy", 1) == kToy);
  try {
    train::resolve_device("toy", 2);
    FAIL("no error for a third rank on two toy devices");
  } catch (const accel::ConfigError& e) {
    CHECK(std::string(e.what()).find("toy:2 but only 2 toy device(s)") != std::string::npos);
  }
}

TEST_CASE("device runtime: a toy device's steps are timed by its events and split at its marks") {
  ToyAccelerator toy;
  train::StepClock clock(kToy);
  CHECK(clock.on_device());
  clock.begin();
  clock.mark(train::StepPhase::Forward);
  clock.mark(train::StepPhase::Optimizer);
  clock.end();
  clock.begin();
  clock.end();
  const auto steps = clock.take();
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].total_ms == doctest::Approx(4.5));  // four events, 1.5 ms apart
  CHECK(steps[0].split);
  CHECK(steps[0].phase_ms[0] == doctest::Approx(1.5));
  CHECK(steps[0].phase_ms[1] == 0.0);
  CHECK(steps[0].phase_ms[3] == doctest::Approx(1.5));
  CHECK(steps[0].other_ms() == doctest::Approx(1.5));
  CHECK(steps[1].total_ms == doctest::Approx(1.5));
  CHECK_FALSE(steps[1].split);
  CHECK(clock.take().empty());
}

TEST_CASE("device runtime: a toy device's step allocations come from its allocator and the run's peak survives the step's reset") {
  ToyAccelerator toy;
  CHECK(train::DeviceAllocationCounter::available(kToy));
  CHECK_FALSE(train::DeviceAllocationCounter::available(torch::kCPU));
  g_toy.stats = {10, 1000, 400, 900, 1200};  // the run so far peaked at 900 allocated
  train::DeviceAllocationCounter counter(kToy);
  counter.start();
  g_toy.stats.allocations += 3;
  g_toy.stats.allocated_bytes += 300;
  g_toy.stats.peak_bytes = 650;  // the step's own peak: 250 above the 400 held when it began
  const auto counts = counter.stop();
  REQUIRE(counts.has_value());
  CHECK(counts->allocations == 3);
  CHECK(counts->bytes == 300);
  CHECK(counts->peak_bytes == 250);
  CHECK(counts->source == "toy allocator");
  CHECK(g_toy.syncs >= 2);
  const auto peak = train::peak_memory(kToy);
  REQUIRE(peak.has_value());
  CHECK(peak->max_allocated == 900);  // the run's, carried across the step's reset
  CHECK(peak->max_reserved == 1200);
  train::reset_peak_memory(kToy);  // a fresh timed region forgets the carried peak
  CHECK(train::peak_memory(kToy)->max_allocated == 400);
}

TEST_CASE("device runtime: a toy device warms a graphed step up aside then captures it once and replays it") {
  ToyAccelerator toy;
  int bodies = 0;
  auto body = [&](const accel::data::Inputs& in, const torch::Tensor&) {
    ++bodies;
    return std::make_pair(torch::zeros({}), in.at("x"));
  };
  SUBCASE("a capture that fails is said, and a later call captures afresh") {
    g_toy.fail_capture = true;
    train::GraphedStep g(kToy, body, 2);
    for (int i = 0; i < 2; ++i) g.run({{"x", torch::ones({4, 2})}}, torch::zeros({4}, torch::kLong));
    try {
      g.run({{"x", torch::ones({4, 2})}}, torch::zeros({4}, torch::kLong));
      FAIL("no error for a failed capture");
    } catch (const accel::RunError& e) {
      CHECK(std::string(e.what()).find("capturing the train step failed: the toy device cannot capture this") !=
            std::string::npos);
    }
    CHECK_FALSE(g.captured());
    g_toy.fail_capture = false;
    g.run({{"x", torch::ones({4, 2})}}, torch::zeros({4}, torch::kLong));
    CHECK(g.captured());
  }
  SUBCASE("warm-up, capture, replays") {
    train::GraphedStep g(kToy, body, 2);
    for (int i = 0; i < 5; ++i) g.run({{"x", torch::ones({4, 2})}}, torch::zeros({4}, torch::kLong));
    CHECK(g_toy.aside == 2);     // the warm-up ran on the side stream
    CHECK(g_toy.captures == 1);  // the third call captured
    CHECK(bodies == 3);          // two warm-ups and the capture; replays run no body
    CHECK(g.captured());
    CHECK(g.replays() == 3);     // the capturing call replays what it captured, then two more
    CHECK(g_toy.replays == 3);
    CHECK(g.eager_calls() == 2);
  }
}
