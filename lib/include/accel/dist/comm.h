// The process group of a multi-process run: rendezvous through a store (a
// FileStore for one node, accel-bench's own store or torchrun's otherwise), then PyTorch's ProcessGroupGloo (CPU) or
// ProcessGroupNCCL (CUDA, where this LibTorch has it), behind a small
// tensor-level API. c10d's headers stay inside comm.cpp: they are heavy and
// differ between LibTorch versions (torch_compat.h, ACCEL_COMPAT_C10D part).
//
// Every collective is called by every rank in the same order. A collective
// that cannot finish within the timeout (a peer died or hangs) throws
// accel::RunError instead of blocking for Gloo's default 30 minutes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace accel::dist {

enum class ReduceOp { Sum, Mean, Max, Min };

// An asynchronous collective in flight. wait() blocks until it is done and
// runs its completion step (e.g. the division of a Mean, the copy of a shard).
// A default-constructed Handle is done already.
class Handle {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual void wait() = 0;
  };
  Handle() = default;
  explicit Handle(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  void wait() {
    if (impl_) {
      auto impl = std::move(impl_);
      impl->wait();
    }
  }
  bool pending() const { return impl_ != nullptr; }

 private:
  std::shared_ptr<Impl> impl_;
};

struct CommOptions {
  std::string backend = "gloo";          // gloo | nccl
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                   // rank 0 listens here (must be given)
  // Ranks of one node started by our launcher meet in a c10d FileStore in
  // this folder (private to the user: mode 0700) instead of rank 0's
  // TCPStore, which listens on every interface and has no authentication;
  // then nothing of the rendezvous is reachable from the network.
  std::string store_dir;
  // Ranks started by torchrun whose agent hosts a store for them
  // (TORCHELASTIC_USE_AGENT_STORE=True): they all join torchrun's TCPStore at
  // master_addr:master_port as clients, under the prefix torch.distributed
  // uses ("/worker/attempt_<restart count>"), instead of hosting one.
  bool agent_store = false;
  int agent_attempt = 0;
  // Otherwise (other multi-node jobs) rank 0 hosts accel-bench's own store
  // (accel/dist/net_store.h) on master_addr only, authenticated when a shared
  // secret is given (ACCEL_STORE_TOKEN).
  std::string store_token;
  int num_nodes = 1;  // a store for several nodes must not listen on loopback only
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{std::chrono::seconds(180)};
  torch::Device device = torch::kCPU;    // NCCL: this rank's cuda device
  // Gloo: how long a wait polls the collective (yielding the core between
  // polls) before it sleeps; 0 sleeps at once. NCCL waits never block the host.
  std::chrono::microseconds spin{0};
};

// Collectives this rank ran, by what was asked (op), what the backend ran
// for it (primitive: Gloo has no reduce-scatter, so an all-reduce of the
// whole buffer), and the message size in bytes (the whole buffer: the
// tensor of an all-reduce or broadcast, the gathered output of an
// all-gather, the input of a reduce-scatter, as nccl-tests count them).
struct CollectiveCount {
  std::string op, primitive;
  int64_t bytes = 0;
  int64_t calls = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // "spin" or "block": how this rank waits for a collective (CommOptions::spin).
  virtual std::string wait_mode() const = 0;

  // In place on every rank. Mean = Sum / size (Gloo has no AVG).
  virtual Handle all_reduce(torch::Tensor& t, ReduceOp op) = 0;
  virtual void broadcast(torch::Tensor& t, int root) = 0;
  // full (contiguous, size() * shard.numel() elements, same dtype) receives
  // every rank's shard in rank order.
  virtual Handle all_gather(const torch::Tensor& shard, torch::Tensor& full) = 0;
  // shard (contiguous, full.numel() / size() elements) receives this rank's
  // slice of the element-wise reduction of every rank's full. Sum or Mean.
  // Where the backend has no reduce-scatter (Gloo) it is an all-reduce of
  // full (which is then overwritten) followed by a slice copy.
  virtual Handle reduce_scatter(torch::Tensor& full, torch::Tensor& shard, ReduceOp op) = 0;
  virtual void barrier() = 0;
  // Every rank's string, in rank order (through the store; small payloads).
  virtual std::vector<std::string> all_gather_strings(const std::string& mine) = 0;
  // Whether reduce_scatter is the backend's own collective.
  virtual bool native_reduce_scatter() const = 0;
  // Where the ranks met: "a private folder", "accel-bench's store on
  // 10.0.0.1:29500 (authenticated)", "torchrun's store on ...".
  virtual std::string rendezvous() const = 0;
  // The collectives launched since the last call (barriers count with 0
  // bytes), by (op, primitive, bytes), and the counts start afresh.
  virtual std::vector<CollectiveCount> take_counts() = 0;
  // "" or a warning that the rendezvous listened on the network without
  // authentication, with what to do about it.
  virtual std::string rendezvous_warning() const = 0;
};

// Rendezvous and process group. The ranks meet in the store CommOptions
// names (a FileStore in store_dir; torchrun's TCPStore; else accel-bench's
// store, hosted by rank 0 on master_addr:master_port); every rank registers
// and waits until all world_size ranks have joined. Throws accel::RunError
// with what went wrong: "rendezvous at ADDR:PORT: port PORT is in use", "...
// only K of N ranks joined within T s", "... could not reach the store ...
// within T s", "... is not an address of this machine".
std::unique_ptr<Comm> connect(const CommOptions& options);

// Whether this build can create the named backend ("gloo" always; "nccl"
// where LibTorch has CUDA and the NCCL process group).
bool backend_available(const std::string& backend);

}  // namespace accel::dist
