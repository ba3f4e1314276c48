// An accelerator's runtime: what the training core asks of a device beyond
// its tensors (how many there are, waiting for queued work, the allocator's
// counts and peaks, timing events on its stream, capturing and replaying a
// step). One implementation serves one row of the accelerator registry
// (accel/plan/accelerator.h), found by the row's kind or the device type:
// the host's (a CPU: synchronous work, the host clock, no allocator
// statistics, no capture) and, in a CUDA build, CUDA's
// (lib/train/device_cuda.cpp). device.h's clock, counters and graphed step
// are written against this interface alone, so they hold no device code; a
// third accelerator adds its runtime file and one line in the builtin list
// (lib/train/device_runtime.cpp), beside its plan row.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/metrics/energy.h"

namespace accel::train {

// A device allocator's statistics for one device: running counts since the
// process began, and peaks since the last reset_allocator_peaks().
struct AllocatorStats {
  int64_t allocations = 0;          // allocations made so far
  int64_t allocated_bytes = 0;      // bytes handed out so far
  int64_t current_bytes = 0;        // bytes held now
  int64_t peak_bytes = 0;           // the most held at once since the reset
  int64_t peak_reserved_bytes = 0;  // the most the allocator reserved from the device since the reset
};

// A point on a device's current stream, for timing without a host sync.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void record() = 0;       // on the device's current stream
  virtual void synchronize() = 0;  // waits until the device has passed it
  // Milliseconds from this event to `later` (both recorded and passed).
  virtual double elapsed_ms(DeviceEvent& later) = 0;
};

// A training step captured once and replayed (CUDA Graphs on CUDA), with
// the side stream its eager warm-up and capture run on.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Runs `body` on the side stream, ordered after the work queued so far
  // and before whatever the caller queues next.
  virtual void run_aside(const std::function<void()>& body) = 0;
  // Captures `body` (waits for queued work first); throws what the capture
  // threw, leaving nothing captured.
  virtual void capture(const std::function<void()>& body) = 0;
  virtual void replay() = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // The accelerator row it serves ("cpu", "cuda") and its torch device type.
  virtual std::string kind() const = 0;
  virtual c10::DeviceType type() const = 0;
  // The devices of this kind the process sees (the host: 1).
  virtual int device_count() const = 0;
  // Waits for the device's queued work (nothing where work is synchronous).
  virtual void synchronize(int index) const { (void)index; }
  // The allocator's statistics; nullopt where the device has none of its own
  // (a CPU's allocations are counted by metrics::CpuAllocationCounter).
  virtual std::optional<AllocatorStats> allocator_stats(int index) const {
    (void)index;
    return std::nullopt;
  }
  virtual void reset_allocator_peaks(int index) const { (void)index; }
  // What a step's allocation counts came from, as a result records it.
  virtual std::string allocator_name() const { return ""; }
  // A timing event on the device's stream; nullptr where steps are timed by
  // the host clock (work is synchronous there).
  virtual std::unique_ptr<DeviceEvent> make_event(int index) const {
    (void)index;
    return nullptr;
  }
  // A graph for one step; nullptr where steps cannot be captured.
  virtual std::unique_ptr<DeviceGraph> make_graph(int index) const {
    (void)index;
    return nullptr;
  }
  // The device's cumulative energy counter (accel/metrics/energy.h), or
  // nullptr with *why set (one line) where there is none.
  virtual std::unique_ptr<metrics::EnergyCounter> energy_counter(int index, std::string* why) const {
    (void)index;
    *why = "no energy counter for " + kind() + " devices";
    return nullptr;
  }
  virtual bool has_events() const { return false; }
  virtual bool has_graphs() const { return false; }
  virtual bool has_allocator_stats() const { return false; }
};

// The runtimes this build has, the host's first.
std::vector<const DeviceRuntime*> device_runtimes();
// nullptr when this build has no runtime of that kind.
const DeviceRuntime* find_device_runtime(const std::string& kind);
// The runtime of a device type: nullptr, or RunError, when this build has none.
const DeviceRuntime* find_device_runtime(c10::DeviceType type);
const DeviceRuntime& device_runtime(c10::DeviceType type);
inline const DeviceRuntime& device_runtime(const torch::Device& device) {
  return device_runtime(device.type());
}
// Adds a runtime (a test's); RunError when its kind or device type is taken
// or its kind is no accelerator row (plan::add_accelerator first).
// The registry is the process's: add before devices are resolved.
void add_device_runtime(std::unique_ptr<DeviceRuntime> runtime);
// Takes one added back; the host's stays.
void remove_device_runtime(const std::string& kind);

}  // namespace accel::train
