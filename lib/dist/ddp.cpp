// DistributedDataParallel on c10d, the way PyTorch's Reducer works, written
// here because its C++ header cannot be used with Debian's LibTorch 1.13
// (DESIGN.md): every rank starts from rank 0's parameters and buffers; the
// parameters are grouped into buckets of about bucket_mb in reverse
// registration order (the order backward produces gradients in), the first
// bucket small so communication starts early where that pays
// (StrategyKnobs::small_first_bucket); a gradient hook on each
// parameter copies its gradient into its bucket, and the moment a bucket is
// complete its all-reduce (mean) is launched asynchronously, so communication
// overlaps the rest of the backward pass. finish_gradient_sync launches what
// is left (parameters that got no gradient), waits for every bucket and
// writes the averaged gradients back into .grad.
#include <map>

#include "accel/util/errors.h"
#include "strategies.h"

namespace accel::dist {
namespace {

constexpr int64_t kFirstBucketBytes = int64_t(1) << 20;  // as PyTorch's first_bucket_bytes

struct Slot {
  int bucket = 0;
  int64_t offset = 0;
};

struct Bucket {
  torch::Tensor flat;
  std::vector<int> params;  // indices into DdpStrategy::params_
  int pending = 0;          // gradients still to arrive in this backward
  Handle handle;
  bool launched = false;
};

class DdpStrategy final : public Strategy {
 public:
  DdpStrategy(const StrategyOptions& o, DistContext ctx)
      : Strategy(std::move(ctx)),
        bucket_bytes_(int64_t(o.knobs.bucket_mb * 1024 * 1024)),
        first_bucket_bytes_(o.knobs.small_first_bucket ? std::min(kFirstBucketBytes, bucket_bytes_)
                                                       : bucket_bytes_) {
    if (o.knobs.bucket_mb <= 0) throw ConfigError("runtime.bucket_mb: must be > 0");
  }

  std::string name() const override { return "ddp"; }

  std::unique_ptr<torch::optim::Optimizer> setup(std::shared_ptr<torch::nn::Module> model,
                                                 const OptimizerFactory& make_optimizer) override {
    module_ = std::move(model);
    for (const auto& p : module_->parameters()) {
      if (p.requires_grad()) params_.push_back(p);
    }
    if (ctx_.comm) {
      broadcast_module_state();
      build_buckets();
      register_hooks();
    }
    return make_optimizer(module_->parameters());
  }

  void pre_backward() override {
    armed_ = ctx_.comm && backward_sync_;
    if (!armed_) return;
    for (auto& b : buckets_) {
      b.pending = int(b.params.size());
      b.launched = false;
      b.handle = Handle();
    }
  }

  void finish_gradient_sync() override {
    if (!armed_) return;
    armed_ = false;
    for (size_t k = 0; k < buckets_.size(); ++k) {
      if (buckets_[k].launched) continue;
      // Some parameter took no part in this backward: its bucket gets the
      // gradient it has (an accumulated one, or zeros) and is reduced too,
      // so every rank launches the same collectives in the same order.
      for (int i : buckets_[k].params) {
        if (ready_[size_t(i)]) continue;
        auto view = slot_view(i);
        const auto& g = params_[size_t(i)].grad();
        if (g.defined()) {
          view.copy_(g.view(-1));
        } else {
          view.zero_();
        }
      }
      launch(int(k));
    }
    for (auto& b : buckets_) b.handle.wait();
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      auto reduced = slot_view(int(i)).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(reduced);
      } else {
        p.mutable_grad() = reduced.clone();
      }
    }
  }

 private:
  void broadcast_module_state() {
    // Parameters and buffers, coalesced per dtype into one broadcast each.
    std::map<c10::ScalarType, std::vector<torch::Tensor>> groups;
    for (const auto& p : module_->parameters()) groups[p.scalar_type()].push_back(p);
    for (const auto& b : module_->buffers()) groups[b.scalar_type()].push_back(b);
    torch::NoGradGuard no_grad;
    for (auto& [dtype, tensors] : groups) {
      std::vector<torch::Tensor> flat_parts;
      for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape(-1));
      auto flat = torch::cat(flat_parts);
      ctx_.comm->broadcast(flat, 0);
      int64_t off = 0;
      for (auto& t : tensors) {
        t.detach().copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    }
  }

  void build_buckets() {
    slots_.resize(params_.size());
    ready_.assign(params_.size(), false);
    std::map<c10::ScalarType, int> open;  // dtype -> bucket being filled
    std::vector<int64_t> bytes;
    for (int i = int(params_.size()) - 1; i >= 0; --i) {
      const auto& p = params_[size_t(i)];
      const int64_t nbytes = p.numel() * int64_t(p.element_size());
      auto it = open.find(p.scalar_type());
      const bool first = it != open.end() && it->second == 0;
      const int64_t cap = first ? first_bucket_bytes_ : bucket_bytes_;
      if (it == open.end() || (bytes[size_t(it->second)] > 0 && bytes[size_t(it->second)] + nbytes > cap)) {
        buckets_.emplace_back();
        bytes.push_back(0);
        open[p.scalar_type()] = int(buckets_.size()) - 1;
        it = open.find(p.scalar_type());
      }
      const int b = it->second;
      slots_[size_t(i)] = {b, bytes[size_t(b)] / int64_t(p.element_size())};
      buckets_[size_t(b)].params.push_back(i);
      bytes[size_t(b)] += nbytes;
    }
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const auto& first = params_[size_t(buckets_[b].params.front())];
      buckets_[b].flat = torch::zeros({bytes[b] / int64_t(first.element_size())},
                                      first.options().requires_grad(false));
    }
  }

  void register_hooks() {
    for (size_t i = 0; i < params_.size(); ++i) {
      const int index = int(i);
      params_[i].register_hook([this, index](torch::Tensor grad) { on_grad(index, grad); });
    }
  }

  torch::Tensor slot_view(int i) {
    const auto& s = slots_[size_t(i)];
    return buckets_[size_t(s.bucket)].flat.narrow(0, s.offset, params_[size_t(i)].numel());
  }

  // Runs inside backward, before autograd accumulates `grad` into .grad: the
  // bucket gets what .grad will hold (an earlier accumulated gradient plus
  // this one), which is what must be averaged.
  void on_grad(int i, const torch::Tensor& grad) {
    if (!armed_) return;
    torch::NoGradGuard no_grad;
    auto view = slot_view(i);
    view.copy_(grad.reshape(-1));
    const auto& acc = params_[size_t(i)].grad();
    if (acc.defined()) view.add_(acc.reshape(-1));
    ready_[size_t(i)] = true;
    auto& b = buckets_[size_t(slots_[size_t(i)].bucket)];
    if (--b.pending == 0) launch(slots_[size_t(i)].bucket);
  }

  void launch(int k) {
    auto& b = buckets_[size_t(k)];
    for (int i : b.params) ready_[size_t(i)] = false;
    b.flat.div_(double(ctx_.world_size));
    b.handle = ctx_.comm->all_reduce(b.flat, ReduceOp::Sum);
    b.launched = true;
  }

  int64_t bucket_bytes_;
  int64_t first_bucket_bytes_;
  std::vector<torch::Tensor> params_;
  std::vector<Slot> slots_;
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  bool armed_ = false;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp(const StrategyOptions& options, DistContext ctx) {
  return std::make_unique<DdpStrategy>(options, std::move(ctx));
}

}  // namespace accel::dist
