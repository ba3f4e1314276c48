// CUDA's row of the device runtimes (accel/train/device_runtime.h): the
// current stream's synchronisation, the caching allocator's statistics,
// timing events and CUDA Graphs. Compiled only where the LibTorch found is a
// CUDA build (ACCEL_WITH_CUDA, util/build_features.h); every CUDA call of
// the training core's device code is here.
#include "accel/train/device_runtime.h"
#include "accel/util/build_features.h"

#if ACCEL_WITH_CUDA

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "accel/util/torch_compat.h"

namespace accel::train {

namespace {

class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(int index) : index_(index) {}
  void record() override { event_.record(c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(index_))); }
  void synchronize() override { event_.synchronize(); }
  double elapsed_ms(DeviceEvent& later) override {
    return double(event_.elapsed_time(static_cast<CudaEvent&>(later).event_));
  }

 private:
  int index_;
  // Timing events (the default flags); CUDAEvent's default disables timing.
  at::cuda::CUDAEvent event_{cudaEventDefault};
};

class CudaGraph final : public DeviceGraph {
 public:
  explicit CudaGraph(int index) : index_(index) {}

  void run_aside(const std::function<void()>& body) override {
    // PyTorch's whole-network recipe: the warm-up runs on a side stream,
    // ordered after the input copies and before what the caller does next.
    auto current = c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(index_));
    auto side = this->side();
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      body();
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(current);
  }

  void capture(const std::function<void()>& body) override {
    c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(index_)).synchronize();
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    auto side = this->side();
    try {
      c10::cuda::CUDAStreamGuard guard(side);
      compat::cuda_graph_capture_begin(*graph_, cudaStreamCaptureModeThreadLocal);
      try {
        body();
      } catch (...) {
        try {
          graph_->capture_end();
        } catch (...) {
        }
        throw;
      }
      graph_->capture_end();
    } catch (...) {
      graph_.reset();
      throw;
    }
    side.synchronize();
  }

  void replay() override { graph_->replay(); }

 private:
  // One side stream for the warm-up calls and the capture, taken from the
  // pool once (the pool hands its streams out round-robin).
  c10::cuda::CUDAStream side() {
    if (!side_) side_ = c10::cuda::getStreamFromPool(false, c10::DeviceIndex(index_));
    return *side_;
  }
  int index_;
  std::optional<c10::cuda::CUDAStream> side_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  std::string kind() const override { return "cuda"; }
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }
  int device_count() const override {
    return torch::cuda::is_available() ? int(torch::cuda::device_count()) : 0;
  }
  void synchronize(int index) const override {
    c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(index)).synchronize();
  }
  std::optional<AllocatorStats> allocator_stats(int index) const override {
    compat::lazy_init_cuda(at::globalContext());  // the allocator knows no device before it
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::DeviceIndex(index));
    // Index 0 of each StatArray is StatType::AGGREGATE (all pools) in every
    // version; the enum's namespace moved between versions.
    AllocatorStats s;
    s.allocations = stats.allocation[0].allocated;
    s.allocated_bytes = stats.allocated_bytes[0].allocated;
    s.current_bytes = stats.allocated_bytes[0].current;
    s.peak_bytes = stats.allocated_bytes[0].peak;
    s.peak_reserved_bytes = stats.reserved_bytes[0].peak;
    return s;
  }
  void reset_allocator_peaks(int index) const override {
    compat::lazy_init_cuda(at::globalContext());
    c10::cuda::CUDACachingAllocator::resetPeakStats(c10::DeviceIndex(index));
  }
  std::string allocator_name() const override { return "CUDA caching allocator"; }
  std::unique_ptr<DeviceEvent> make_event(int index) const override {
    return std::make_unique<CudaEvent>(index);
  }
  std::unique_ptr<DeviceGraph> make_graph(int index) const override {
    return std::make_unique<CudaGraph>(index);
  }
  // NVML's counter of this GPU, found by its PCI bus id (CUDA's device order
  // need not be NVML's: CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER).
  std::unique_ptr<metrics::EnergyCounter> energy_counter(int index, std::string* why) const override {
    char bus_id[32] = {};
    if (const cudaError_t rc = cudaDeviceGetPCIBusId(bus_id, int(sizeof(bus_id)), index); rc != cudaSuccess) {
      (void)cudaGetLastError();  // clear it: the error is not the run's
      *why = std::string("cudaDeviceGetPCIBusId: ") + cudaGetErrorString(rc);
      return nullptr;
    }
    return metrics::open_nvml_counter(bus_id, why);
  }
  bool has_events() const override { return true; }
  bool has_graphs() const override { return true; }
  bool has_allocator_stats() const override { return true; }
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_cuda_runtime() { return std::make_unique<CudaRuntime>(); }

}  // namespace accel::train

#endif  // ACCEL_WITH_CUDA
