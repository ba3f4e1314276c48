// NVML's energy counter, opened at run time, and a run's energy meter
// (accel/metrics/energy.h).
#include "accel/metrics/energy.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace accel::metrics {

namespace energy_detail {

// NVML's C interface, as nvml.h declares it (the functions' ABI is stable:
// the _v2 names have been the exported ones since CUDA 7). nvmlReturn_t is an
// enum (int); NVML_SUCCESS is 0; nvmlDevice_t is an opaque pointer.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;

struct Nvml {
  NvmlReturn (*init)() = nullptr;                                  // nvmlInit_v2
  NvmlReturn (*shutdown)() = nullptr;                              // nvmlShutdown
  const char* (*error_string)(NvmlReturn) = nullptr;               // nvmlErrorString
  NvmlReturn (*by_index)(unsigned, NvmlDevice*) = nullptr;         // nvmlDeviceGetHandleByIndex_v2
  NvmlReturn (*by_pci)(const char*, NvmlDevice*) = nullptr;        // nvmlDeviceGetHandleByPciBusId_v2
  NvmlReturn (*energy)(NvmlDevice, unsigned long long*) = nullptr;  // nvmlDeviceGetTotalEnergyConsumption (mJ)

  std::string error(NvmlReturn rc) const {
    const char* s = error_string ? error_string(rc) : nullptr;
    return (s && *s ? std::string(s) : std::string("error")) + " (" + std::to_string(rc) + ")";
  }
};

// The library, opened once per process and file and never closed (NVML may
// keep threads of its own; a counter's destructor shuts its use down).
const Nvml* load_nvml(std::string* why) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Nvml>> loaded;
  const char* env = std::getenv("ACCEL_NVML_LIBRARY");
  const std::string file = env && *env ? env : "libnvidia-ml.so.1";
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = loaded.find(file); it != loaded.end()) return it->second.get();
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    *why = "NVML not loaded (" + (e ? std::string(e) : file) + ")";
    return nullptr;
  }
  auto nvml = std::make_unique<Nvml>();
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  sym(nvml->init, "nvmlInit_v2");
  sym(nvml->shutdown, "nvmlShutdown");
  sym(nvml->error_string, "nvmlErrorString");
  sym(nvml->by_index, "nvmlDeviceGetHandleByIndex_v2");
  sym(nvml->by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
  sym(nvml->energy, "nvmlDeviceGetTotalEnergyConsumption");
  if (!missing.empty()) {
    *why = file + " lacks " + missing;
    dlclose(lib);
    return nullptr;
  }
  return (loaded[file] = std::move(nvml)).get();
}

class NvmlCounter final : public EnergyCounter {
 public:
  NvmlCounter(const Nvml* nvml, NvmlDevice device, std::string id) : nvml_(nvml), device_(device), id_(std::move(id)) {}
  ~NvmlCounter() override { nvml_->shutdown(); }
  NvmlCounter(const NvmlCounter&) = delete;
  NvmlCounter& operator=(const NvmlCounter&) = delete;

  std::string source() const override { return "nvml"; }
  std::string device_id() const override { return id_; }
  std::optional<double> joules(std::string* why) override {
    unsigned long long mj = 0;
    const NvmlReturn rc = nvml_->energy(device_, &mj);
    if (rc != kNvmlSuccess) {
      *why = "nvmlDeviceGetTotalEnergyConsumption: " + nvml_->error(rc);
      return std::nullopt;
    }
    return double(mj) / 1e3;
  }

 private:
  const Nvml* nvml_;
  NvmlDevice device_;
  std::string id_;
};

}  // namespace energy_detail

std::unique_ptr<EnergyCounter> open_nvml_counter(const std::string& pci_bus_id, std::string* why) {
  using namespace energy_detail;
  std::string local;
  if (!why) why = &local;
  const Nvml* nvml = load_nvml(why);
  if (!nvml) return nullptr;
  if (const NvmlReturn rc = nvml->init(); rc != kNvmlSuccess) {
    *why = "nvmlInit_v2: " + nvml->error(rc);
    return nullptr;
  }
  NvmlDevice device = nullptr;
  const NvmlReturn rc = pci_bus_id.empty() ? nvml->by_index(0, &device)
                                           : nvml->by_pci(pci_bus_id.c_str(), &device);
  if (rc != kNvmlSuccess || !device) {
    *why = "NVML has no GPU " + (pci_bus_id.empty() ? std::string("0") : "at PCI bus id " + pci_bus_id) +
           ": " + nvml->error(rc);
    nvml->shutdown();
    return nullptr;
  }
  auto counter = std::make_unique<NvmlCounter>(nvml, device, pci_bus_id.empty() ? "nvml:0" : pci_bus_id);
  if (!counter->joules(why)) return nullptr;  // e.g. not supported before Volta; shuts down
  return counter;
}

EnergyMeter::EnergyMeter(std::unique_ptr<EnergyCounter> counter, std::string why_not)
    : counter_(std::move(counter)), why_not_(counter_ ? std::string() : std::move(why_not)) {
  if (!counter_ && why_not_.empty()) why_not_ = "no energy counter on this device";
}

std::string EnergyMeter::source() const { return counter_ ? counter_->source() : kEnergyNotMeasured; }

std::optional<double> EnergyMeter::read() {
  if (!counter_) return std::nullopt;
  std::string why;
  const auto j = counter_->joules(&why);
  if (!j || !std::isfinite(*j)) {
    why_not_ = "the energy counter stopped answering mid-run: " + (why.empty() ? "not a number" : why);
    counter_.reset();
    training_at_.reset();
    open_at_.reset();
    return std::nullopt;
  }
  return j;
}

void EnergyMeter::start_training() { training_at_ = read(); }

void EnergyMeter::open() {
  if (!open_at_) open_at_ = read();
}

void EnergyMeter::close() {
  if (!open_at_) return;
  const double from = *open_at_;
  open_at_.reset();
  if (const auto now = read()) timed_ += *now - from;
}

std::optional<double> EnergyMeter::timed_joules() const {
  if (!counter_) return std::nullopt;
  return timed_;
}

std::optional<double> EnergyMeter::training_joules() {
  if (!training_at_) return std::nullopt;
  const double from = *training_at_;
  const auto now = read();
  if (!now) return std::nullopt;
  return *now - from;
}

EnergyFigures energy_figures(const std::string& source, const std::string& note,
                             std::optional<double> joules, int64_t steps, double samples,
                             std::optional<double> to_target) {
  EnergyFigures f;
  f.source = source;
  f.note = note;
  if (source == kEnergyNotMeasured || !joules || !std::isfinite(*joules) || *joules < 0) {
    f.source = kEnergyNotMeasured;
    if (joules && *joules < 0) f.note = "the energy counter went back mid-run (a driver reload?)";
    if (f.note.empty()) f.note = "no energy counter on this device";
    return f;
  }
  f.note.clear();
  f.joules = joules;
  if (steps > 0) f.joules_per_step = *joules / double(steps);
  if (samples > 0) f.joules_per_sample = *joules / samples;
  if (to_target && std::isfinite(*to_target) && *to_target >= 0) f.joules_to_target = to_target;
  return f;
}

}  // namespace accel::metrics
