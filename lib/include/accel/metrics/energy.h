// The energy a run's steps take, from the device's own cumulative counter.
//
// On an NVIDIA GPU the counter is NVML's total energy consumption
// (nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver was
// loaded, Volta and later, no root needed), read through libnvidia-ml.so.1
// opened at run time, so nothing new is needed to build and a machine without
// the driver simply measures nothing. The run reads it after a device sync
// at the edges of the same window its wall-clock rate times (the steps after
// warm-up, validations and checkpoint writes left out) and from the start of
// training to the moment a target is first reached; result.json then says
// energy_source "nvml". Where there is no counter (a CPU, a GPU without
// NVML's energy counter) it says "not measured" and why, never a guess.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace accel::metrics {

// A device's cumulative energy counter.
class EnergyCounter {
 public:
  virtual ~EnergyCounter() = default;
  // What the counter is ("nvml").
  virtual std::string source() const = 0;
  // Joules since the counter's own origin; nullopt with *why set when the
  // read fails.
  virtual std::optional<double> joules(std::string* why) = 0;
  // Which device it counts, unique on its host (a GPU's PCI bus id): ranks
  // that share a device count its energy once.
  virtual std::string device_id() const { return ""; }
};

// NVML's counter of the GPU with this PCI bus id ("0000:17:00.0", as CUDA
// names it), or, with an empty id, of NVML's device 0. nullptr with *why set
// (one line) when the library is missing, lacks a function, cannot start,
// knows no such GPU, or cannot read its energy (a GPU before Volta).
// ACCEL_NVML_LIBRARY, when set, names the library file to open instead of
// libnvidia-ml.so.1 (an install outside the loader's path; the tests' stand-in).
std::unique_ptr<EnergyCounter> open_nvml_counter(const std::string& pci_bus_id, std::string* why);

// The name a run records where no counter answered.
inline constexpr const char* kEnergyNotMeasured = "not measured";

// A run's energy: windows opened and closed around its timed steps, and the
// total since training began. Every call is made after the device is synced
// (the counter sees the device's past, not the host's queue). A read that
// fails stops the meter: it then reports "not measured" and why, and the run
// goes on.
class EnergyMeter {
 public:
  EnergyMeter() = default;  // no counter: not measured
  EnergyMeter(std::unique_ptr<EnergyCounter> counter, std::string why_not);

  bool measuring() const { return counter_ != nullptr; }
  // "nvml", or kEnergyNotMeasured.
  std::string source() const;
  // Why nothing was measured ("" while measuring).
  const std::string& why_not() const { return why_not_; }
  // The counter's device (EnergyCounter::device_id), "" without one.
  std::string device_id() const { return counter_ ? counter_->device_id() : ""; }

  void start_training();  // training starts: the origin of training_joules()
  void open();            // a timed window starts (no-op while one is open)
  void close();           // it ends, its energy added to timed_joules()
  bool is_open() const { return open_at_.has_value(); }

  // Joules in the closed windows; nullopt when not measured.
  std::optional<double> timed_joules() const;
  // Joules since start_training(), read now; nullopt when not measured.
  std::optional<double> training_joules();

 private:
  std::optional<double> read();

  std::unique_ptr<EnergyCounter> counter_;
  std::string why_not_ = "no energy counter on this device";
  std::optional<double> training_at_, open_at_;
  double timed_ = 0;
};

// What a run's result records of its energy, all ranks together.
struct EnergyFigures {
  std::string source = kEnergyNotMeasured;
  std::string note;                       // why not measured, or ""
  std::optional<double> joules;           // the timed steps'
  std::optional<double> joules_per_step;  // per timed step (all ranks' energy)
  std::optional<double> joules_per_sample;
  // From the start of training to the first validation at the target:
  // warm-up, validations and checkpoint writes included (a resumed run: null).
  std::optional<double> joules_to_target;
};

// The figures from the timed steps' joules, how many steps and samples (all
// ranks) they ran and the joules to the target where one was reached. A
// count of 0 leaves its ratio unmeasured.
EnergyFigures energy_figures(const std::string& source, const std::string& note,
                             std::optional<double> joules, int64_t steps, double samples,
                             std::optional<double> to_target);

}  // namespace accel::metrics
