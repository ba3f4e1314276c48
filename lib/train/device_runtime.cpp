#include "accel/train/device_runtime.h"

#include <algorithm>

#include "accel/plan/accelerator.h"
#include "accel/util/build_features.h"
#include "accel/util/errors.h"

namespace accel::train {

#if ACCEL_WITH_CUDA
// lib/train/device_cuda.cpp
std::unique_ptr<DeviceRuntime> make_cuda_runtime();
#endif

namespace {

// The host: work is synchronous, steps are timed by the host clock, and the
// process's allocations are counted by metrics::CpuAllocationCounter.
class HostRuntime final : public DeviceRuntime {
 public:
  std::string kind() const override { return "cpu"; }
  c10::DeviceType type() const override { return c10::DeviceType::CPU; }
  int device_count() const override { return 1; }
};

std::vector<std::unique_ptr<DeviceRuntime>>& runtimes() {
  static std::vector<std::unique_ptr<DeviceRuntime>> r = [] {
    std::vector<std::unique_ptr<DeviceRuntime>> v;
    v.push_back(std::make_unique<HostRuntime>());
    // The builtin list: one line an accelerator, where the build has it.
#if ACCEL_WITH_CUDA
    v.push_back(make_cuda_runtime());
#endif
    return v;
  }();
  return r;
}

}  // namespace

std::vector<const DeviceRuntime*> device_runtimes() {
  std::vector<const DeviceRuntime*> out;
  for (const auto& r : runtimes()) out.push_back(r.get());
  return out;
}

const DeviceRuntime* find_device_runtime(const std::string& kind) {
  for (const auto& r : runtimes()) {
    if (r->kind() == kind) return r.get();
  }
  return nullptr;
}

const DeviceRuntime* find_device_runtime(c10::DeviceType type) {
  for (const auto& r : runtimes()) {
    if (r->type() == type) return r.get();
  }
  return nullptr;
}

const DeviceRuntime& device_runtime(c10::DeviceType type) {
  if (const auto* r = find_device_runtime(type)) return *r;
  throw RunError("no device runtime for device type " +
                 c10::DeviceTypeName(type, /*lower_case=*/true) + " in this build");
}

void add_device_runtime(std::unique_ptr<DeviceRuntime> runtime) {
  if (!runtime) throw RunError("device runtimes: a null runtime");
  if (plan::find_accelerator(runtime->kind()) == nullptr) {
    throw RunError("device runtimes: \"" + runtime->kind() + "\" is no accelerator row (add its row first)");
  }
  for (const auto& r : runtimes()) {
    if (r->kind() == runtime->kind() || r->type() == runtime->type()) {
      throw RunError("device runtimes: \"" + runtime->kind() + "\" or its device type is taken");
    }
  }
  runtimes().push_back(std::move(runtime));
}

void remove_device_runtime(const std::string& kind) {
  auto& r = runtimes();
  const auto it = std::find_if(r.begin() + 1, r.end(), [&](const auto& x) { return x->kind() == kind; });
  if (it != r.end()) r.erase(it);
}

}  // namespace accel::train
