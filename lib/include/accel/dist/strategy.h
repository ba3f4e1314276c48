// The seam for parallel strategies (Lightning's names: single, ddp, fsdp).
// A strategy owns the device, the rank/world layout and everything that
// crosses processes: wrapping the model (DDP gradient hooks, FSDP sharding),
// finishing gradient reduction before the optimizer step, collectives.
// Today: SingleDeviceStrategy. The distributed issue adds DDP and FSDP on c10d
// behind this interface without touching the training loop.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

namespace accel::dist {

enum class ReduceOp { Sum, Mean, Max };

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  virtual int global_rank() const { return 0; }
  virtual int local_rank() const { return 0; }
  virtual int world_size() const { return 1; }
  virtual torch::Device device() const = 0;
  // After the model is on its device and precision: register hooks or shard.
  virtual void setup_module(torch::nn::Module& /*model*/) {}
  // Between backward and optimizer step: wait for gradient reduction.
  virtual void before_optimizer_step(torch::nn::Module& /*model*/) {}
  // In place; one rank: identity.
  virtual void all_reduce(torch::Tensor& /*t*/, ReduceOp /*op*/) {}
  virtual void barrier() {}
};

// One process, one device (cpu, or cuda:N once the GPU path lands).
class SingleDeviceStrategy : public Strategy {
 public:
  explicit SingleDeviceStrategy(torch::Device device) : device_(device) {}
  std::string name() const override { return "single"; }
  torch::Device device() const override { return device_; }

 private:
  torch::Device device_;
};

}  // namespace accel::dist
