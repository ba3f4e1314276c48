// What the training loop needs from the device beyond tensors: step timing
// without a host sync per step, the CUDA caching allocator's peak memory, and
// the whole train step captured in a CUDA Graph (the article's rung 02: on
// PyTorch, torch.compile; here, one graph replayed per step), with an Adam
// whose step count and learning rate live on the device so it can be captured.
//
// Everything here is written against the device's runtime
// (accel/train/device_runtime.h) and holds no device code: CUDA's calls are
// in lib/train/device_cuda.cpp, compiled where the LibTorch found has CUDA;
// on a CPU the clock is the host's and the memory statistics are absent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "accel/data/batch.h"
#include "accel/metrics/profiler.h"

namespace accel::train {

// ---- memory ---------------------------------------------------------------------------

// The CUDA caching allocator's peaks for one device, as the article reports
// them (torch.cuda.max_memory_allocated / max_memory_reserved).
struct DeviceMemory {
  int64_t max_allocated = 0;
  int64_t max_reserved = 0;
};
// Starts the peaks afresh (the timed region starts); nothing where the
// device's allocator keeps no statistics (a CPU).
void reset_peak_memory(const torch::Device& device);
// The peaks since the last reset; nullopt where the allocator keeps none.
std::optional<DeviceMemory> peak_memory(const torch::Device& device);
// Waits for the device's queued work; nothing on a CPU.
void synchronize(const torch::Device& device);

// Whether an error is the device (or the host) running out of memory: torch's
// OutOfMemoryError (the CUDA caching allocator's "CUDA out of memory"),
// std::bad_alloc, the CPU allocator's "can't allocate memory", or a CUDA
// library failing to allocate (cuBLAS/cuDNN's ALLOC_FAILED, CUDA's "out of
// memory" error). A run records it as result.json's failure
// "out_of_memory", which a batch sweep stops at.
bool is_out_of_memory(const std::exception& e);
// The same judged from a message alone (a rank's failure as its launcher
// reports it).
bool names_out_of_memory(const std::string& message);

// The tensor allocations of one step on a CUDA device, from the caching
// allocator's statistics: allocations and bytes from its running counts, the
// peak above what was allocated when the step began. Reading that peak means
// resetting the allocator's; the peak before it is kept, so peak_memory()
// still reports the whole run's. stop() is nullopt off CUDA (a CPU step's
// allocations are counted by metrics::CpuAllocationCounter).
class DeviceAllocationCounter {
 public:
  explicit DeviceAllocationCounter(const torch::Device& device) : device_(device) {}
  // Whether the device's allocator keeps the statistics this counts from.
  static bool available(const torch::Device& device);
  void start();
  std::optional<metrics::AllocationCounts> stop();

 private:
  torch::Device device_;
  bool running_ = false;
  int64_t allocations_ = 0, bytes_ = 0, current_ = 0;
};

// ---- timing ---------------------------------------------------------------------------

// The parts of a training step the loop marks as each ends: forward (with
// the loss), backward (local gradients), the wait for the gradients'
// reduction (the communication backward did not hide), and the optimizer
// (clipping, the step, ZeRO's all-gather of stepped shards). The rest of a
// step (the batch to the device, metrics, the loss read-back) is "other".
enum class StepPhase { Forward = 0, Backward = 1, CommWait = 2, Optimizer = 3 };
inline constexpr int kStepPhases = 4;

struct StepTime {
  double total_ms = 0;
  bool split = false;  // the step marked its phases (a replayed CUDA Graph does not)
  double phase_ms[kStepPhases] = {0, 0, 0, 0};  // unmarked phases take 0
  double other_ms() const {
    double o = total_ms;
    for (double p : phase_ms) o -= p;
    return o > 0 ? o : 0;
  }
};

// Per-step times that do not stall the device: on CUDA events on the current
// stream (one per mark), read when take() is called (it waits for the last
// step); on a CPU the host clock (work is synchronous there). Marks come in
// phase order; a phase not marked in a step takes no time.
class StepClock {
 public:
  explicit StepClock(torch::Device device);
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;
  void begin();
  void mark(StepPhase phase);
  void end();
  // Each step ended since the last take(), in order.
  std::vector<StepTime> take();
  // True when steps are timed on the device (events), not the host clock.
  bool on_device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- a capturable Adam ----------------------------------------------------------------

// An optimizer whose step() a CUDA Graph can hold: the step count and the
// learning rate live in device tensors, so bias corrections and step size are
// computed on the device (torch::optim::Adam computes them on the host, which a
// graph would freeze at capture; PyTorch's capturable=True does the same as
// this). before_step() runs on the host before every step, replayed or not:
// it creates missing state, counts the host step (checkpoints) and fills the
// learning-rate tensor from the param group's lr (the schedule).
class Capturable {
 public:
  virtual ~Capturable() = default;
  virtual void before_step() = 0;
};

// A torch::optim::Adam (decoupled: AdamW) with that step: the same state,
// options and checkpoint format, so a run may resume with or without graphs.
// amsgrad is not supported.
std::unique_ptr<torch::optim::Optimizer> make_capturable_adam(
    const std::vector<torch::Tensor>& params, double lr, double beta1, double beta2, double eps,
    double weight_decay, bool decoupled);

// ---- the graphed step -----------------------------------------------------------------

// One training step as a function of its inputs: zero the gradients in place,
// forward, loss, backward, optimizer step; returns {loss, logits}.
using StepBody = std::function<std::pair<torch::Tensor, torch::Tensor>(const data::Inputs& x,
                                                                       const torch::Tensor& y)>;

// Runs a StepBody on static input buffers (one per named input): the first
// `warmup` calls eagerly
// (on a side stream, as PyTorch's whole-network capture recipe does), the next
// one captures it in a CUDA Graph, and every call after that copies the batch
// into the buffers and replays the graph. The returned tensors are the
// graph's outputs: read (or clone) them before the next call. With
// capture=false the body always runs eagerly on the static buffers (for
// tests on machines without CUDA).
class GraphedStep {
 public:
  static constexpr int kDefaultWarmup = 3;
  GraphedStep(torch::Device device, StepBody body, int warmup = kDefaultWarmup,
              bool capture = true);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;
  std::pair<torch::Tensor, torch::Tensor> run(const data::Inputs& x, const torch::Tensor& y);
  bool captured() const;
  int64_t replays() const;
  // The calls that run the body eagerly, dispatching its ops (the warm-up;
  // every call without capture). The calls after them replay the graph.
  int64_t eager_calls() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether this build can capture CUDA Graphs (a CUDA LibTorch).
bool cuda_graphs_compiled();

}  // namespace accel::train
