// The energy counter (NVML, opened at run time) against a stand-in library,
// the run's energy meter and the figures a result records.
#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include <doctest/doctest.h>

#include "accel/metrics/energy.h"

using namespace accel::metrics;

namespace energy_test {

// ACCEL_NVML_LIBRARY and NVML_STANDIN_FAIL set for one scope.
class StandIn {
 public:
  explicit StandIn(const char* fail = nullptr, const char* library = ACCEL_NVML_STANDIN) {
    setenv("ACCEL_NVML_LIBRARY", library, 1);
    if (fail) setenv("NVML_STANDIN_FAIL", fail, 1);
    else unsetenv("NVML_STANDIN_FAIL");
    lib_ = dlopen(ACCEL_NVML_STANDIN, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib_ != nullptr);
    reinterpret_cast<void (*)()>(dlsym(lib_, "nvml_standin_reset"))();
  }
  ~StandIn() {
    unsetenv("ACCEL_NVML_LIBRARY");
    unsetenv("NVML_STANDIN_FAIL");
    dlclose(lib_);
  }
  StandIn(const StandIn&) = delete;
  StandIn& operator=(const StandIn&) = delete;
  int inits() const { return reinterpret_cast<int (*)()>(dlsym(lib_, "nvml_standin_inits"))(); }

 private:
  void* lib_ = nullptr;
};

// A counter that answers what it is told.
class Scripted final : public EnergyCounter {
 public:
  explicit Scripted(std::shared_ptr<std::optional<double>> value) : value_(std::move(value)) {}
  std::string source() const override { return "scripted"; }
  std::optional<double> joules(std::string* why) override {
    if (!*value_) *why = "scripted failure";
    return *value_;
  }

 private:
  std::shared_ptr<std::optional<double>> value_;
};

}  // namespace energy_test

TEST_CASE("an NVML counter reads the GPU's millijoules as joules and shuts NVML down when done") {
  energy_test::StandIn nvml;
  std::string why;
  {
    auto c = open_nvml_counter("0000:17:00.0", &why);
    REQUIRE_MESSAGE(c, why);
    CHECK(why.empty());
    CHECK(c->source() == "nvml");
    CHECK(c->device_id() == "0000:17:00.0");
    CHECK(nvml.inits() == 1);
    // Opening read the counter once (5,000,250 mJ): the next reads follow it.
    CHECK(c->joules(&why) == doctest::Approx(5000.5));
    CHECK(c->joules(&why) == doctest::Approx(5000.75));
  }
  CHECK(nvml.inits() == 0);
  auto first = open_nvml_counter("", &why);  // no bus id: NVML's device 0
  REQUIRE_MESSAGE(first, why);
}

TEST_CASE("an NVML counter that cannot be opened says why in one line and leaves NVML shut down") {
  std::string why;
  SUBCASE("no library") {
    energy_test::StandIn nvml(nullptr, "/nonexistent/libnvidia-ml.so.1");
    CHECK_FALSE(open_nvml_counter("0000:17:00.0", &why));
    CHECK(why.find("NVML not loaded") == 0);
    CHECK(why.find("/nonexistent/libnvidia-ml.so.1") != std::string::npos);
  }
  SUBCASE("a library without NVML's functions") {
    energy_test::StandIn nvml(nullptr, "libz.so.1");
    CHECK_FALSE(open_nvml_counter("0000:17:00.0", &why));
    CHECK(why == "libz.so.1 lacks nvmlInit_v2, nvmlShutdown, nvmlErrorString, nvmlDeviceGetHandleByIndex_v2, "
                 "nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetTotalEnergyConsumption");
  }
  SUBCASE("NVML does not start") {
    energy_test::StandIn nvml("init");
    CHECK_FALSE(open_nvml_counter("0000:17:00.0", &why));
    CHECK(why == "nvmlInit_v2: Driver Not Loaded (9)");
    CHECK(nvml.inits() == 0);
  }
  SUBCASE("no GPU at that bus id") {
    energy_test::StandIn nvml;
    CHECK_FALSE(open_nvml_counter("0000:65:00.0", &why));
    CHECK(why == "NVML has no GPU at PCI bus id 0000:65:00.0: Not Found (6)");
    CHECK(nvml.inits() == 0);
  }
  SUBCASE("a GPU without the energy counter") {
    energy_test::StandIn nvml("energy");
    CHECK_FALSE(open_nvml_counter("0000:17:00.0", &why));
    CHECK(why == "nvmlDeviceGetTotalEnergyConsumption: Not Supported (3)");
    CHECK(nvml.inits() == 0);
  }
  CHECK(why.find('\n') == std::string::npos);
}

TEST_CASE("the energy meter adds its open windows only and counts training from its start") {
  auto value = std::make_shared<std::optional<double>>(100.0);
  EnergyMeter m(std::make_unique<energy_test::Scripted>(value), "");
  CHECK(m.measuring());
  CHECK(m.source() == "scripted");
  CHECK(m.why_not().empty());
  m.start_training();
  *value = 110.0;
  m.open();  // warm-up's 10 J are not timed
  *value = 130.0;
  m.open();  // already open: the window still starts at 110
  *value = 150.0;
  m.close();  // 40 J
  *value = 175.0;  // a validation: not timed
  m.close();  // closed already: nothing
  m.open();
  *value = 180.0;
  m.close();  // 5 J
  CHECK_FALSE(m.is_open());
  REQUIRE(m.timed_joules());
  CHECK(*m.timed_joules() == doctest::Approx(45.0));
  REQUIRE(m.training_joules());
  CHECK(*m.training_joules() == doctest::Approx(80.0));
}

TEST_CASE("the energy meter stops and says why when its counter fails mid-run and without one measures nothing") {
  auto value = std::make_shared<std::optional<double>>(1.0);
  EnergyMeter m(std::make_unique<energy_test::Scripted>(value), "");
  m.start_training();
  m.open();
  *value = std::nullopt;
  m.close();
  CHECK_FALSE(m.measuring());
  CHECK(m.source() == kEnergyNotMeasured);
  CHECK(m.why_not() == "the energy counter stopped answering mid-run: scripted failure");
  CHECK_FALSE(m.timed_joules());
  CHECK_FALSE(m.training_joules());

  EnergyMeter none(nullptr, "no energy counter for cpu devices");
  none.start_training();
  none.open();
  none.close();
  CHECK(none.source() == "not measured");
  CHECK(none.why_not() == "no energy counter for cpu devices");
  CHECK_FALSE(none.timed_joules());
  CHECK(EnergyMeter().why_not() == "no energy counter on this device");
}

TEST_CASE("the NVML meter stops mid-run when the stand-in's counter stops answering") {
  energy_test::StandIn nvml("energy-after-3");
  std::string why;
  auto c = open_nvml_counter("0000:17:00.0", &why);  // read 1
  REQUIRE_MESSAGE(c, why);
  EnergyMeter m(std::move(c), "");
  m.open();   // read 2
  m.close();  // read 3: 0.25 J
  REQUIRE(m.timed_joules());
  CHECK(*m.timed_joules() == doctest::Approx(0.25));
  m.open();  // read 4 fails
  CHECK_FALSE(m.measuring());
  CHECK(m.why_not() == "the energy counter stopped answering mid-run: "
                       "nvmlDeviceGetTotalEnergyConsumption: Not Supported (3)");
  CHECK(nvml.inits() == 0);
}

TEST_CASE("energy figures: per timed step and sample and to the target while unmeasured figures stay null") {
  const auto f = energy_figures("nvml", "", 120.0, 40, 640.0, 900.0);
  CHECK(f.source == "nvml");
  CHECK(f.note.empty());
  CHECK(*f.joules == 120.0);
  CHECK(*f.joules_per_step == doctest::Approx(3.0));
  CHECK(*f.joules_per_sample == doctest::Approx(0.1875));
  CHECK(*f.joules_to_target == 900.0);
  const auto none = energy_figures("nvml", "", 120.0, 0, 0, std::nullopt);
  CHECK(none.joules);
  CHECK_FALSE(none.joules_per_step);
  CHECK_FALSE(none.joules_per_sample);
  CHECK_FALSE(none.joules_to_target);
  const auto cpu = energy_figures(kEnergyNotMeasured, "no energy counter for cpu devices", std::nullopt, 40, 640, 1.0);
  CHECK(cpu.source == "not measured");
  CHECK(cpu.note == "no energy counter for cpu devices");
  CHECK_FALSE(cpu.joules);
  CHECK_FALSE(cpu.joules_to_target);
  const auto negative = energy_figures("nvml", "", -1.0, 40, 640, std::nullopt);
  CHECK(negative.source == "not measured");
}
