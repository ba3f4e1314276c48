#include "accel/train/device.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "accel/train/device_runtime.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

namespace accel::train {

// ---- memory ---------------------------------------------------------------------------

namespace {
// Peaks seen before a DeviceAllocationCounter reset the allocator's, by
// device: peak_memory() reports the larger.
std::mutex g_carried_mu;
std::map<std::pair<int, int>, DeviceMemory> g_carried;
std::pair<int, int> carried_key(const torch::Device& device) {
  return {int(device.type()), int(device.index())};
}
}  // namespace

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  // Torch's CPU allocator and CUDA's libraries raise a plain c10::Error; a
  // rank's error may reach here wrapped in another's message.
  return names_out_of_memory(e.what());
}

bool names_out_of_memory(const std::string& what) {
  for (const char* sign : {"out of memory", "can't allocate memory", "not enough memory",
                           "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED"}) {
    if (what.find(sign) != std::string::npos) return true;
  }
  return false;
}

void reset_peak_memory(const torch::Device& device) {
  const auto& rt = device_runtime(device);
  if (!rt.has_allocator_stats()) return;
  rt.reset_allocator_peaks(device.index());
  std::lock_guard<std::mutex> lk(g_carried_mu);
  g_carried.erase(carried_key(device));
}

std::optional<DeviceMemory> peak_memory(const torch::Device& device) {
  const auto stats = device_runtime(device).allocator_stats(device.index());
  if (!stats) return std::nullopt;
  DeviceMemory m;
  m.max_allocated = stats->peak_bytes;
  m.max_reserved = stats->peak_reserved_bytes;
  std::lock_guard<std::mutex> lk(g_carried_mu);
  if (const auto it = g_carried.find(carried_key(device)); it != g_carried.end()) {
    m.max_allocated = std::max(m.max_allocated, it->second.max_allocated);
    m.max_reserved = std::max(m.max_reserved, it->second.max_reserved);
  }
  return m;
}

void synchronize(const torch::Device& device) { device_runtime(device).synchronize(device.index()); }

bool DeviceAllocationCounter::available(const torch::Device& device) {
  return device_runtime(device).has_allocator_stats();
}

void DeviceAllocationCounter::start() {
  const auto& rt = device_runtime(device_);
  if (!rt.has_allocator_stats()) return;
  synchronize(device_);
  const auto before = peak_memory(device_);  // the run's peaks so far, kept across the reset
  {
    std::lock_guard<std::mutex> lk(g_carried_mu);
    g_carried[carried_key(device_)] = *before;
  }
  rt.reset_allocator_peaks(device_.index());
  const auto stats = *rt.allocator_stats(device_.index());
  allocations_ = stats.allocations;
  bytes_ = stats.allocated_bytes;
  current_ = stats.current_bytes;
  running_ = true;
}

std::optional<metrics::AllocationCounts> DeviceAllocationCounter::stop() {
  if (!running_) return std::nullopt;
  running_ = false;
  synchronize(device_);
  const auto stats = *device_runtime(device_).allocator_stats(device_.index());
  metrics::AllocationCounts c;
  c.allocations = stats.allocations - allocations_;
  c.bytes = stats.allocated_bytes - bytes_;
  c.peak_bytes = std::max<int64_t>(0, stats.peak_bytes - current_);
  c.source = device_runtime(device_).allocator_name();
  return c;
}

// ---- timing ---------------------------------------------------------------------------

struct StepClock::Impl {
  torch::Device device{torch::kCPU};
  const DeviceRuntime* runtime = nullptr;
  using Clock = std::chrono::steady_clock;
  // Host clock: this step's start and marks (unset: not marked).
  Clock::time_point started;
  std::optional<Clock::time_point> marks[kStepPhases];
  std::vector<StepTime> done;
  // Device events: one set a step until take().
  struct Events {
    std::unique_ptr<DeviceEvent> begin, end;
    std::unique_ptr<DeviceEvent> marks[kStepPhases];
  };
  std::vector<Events> events;

  std::unique_ptr<DeviceEvent> recorded() const {
    auto e = runtime->make_event(device.index());
    e->record();
    return e;
  }

  // Phase durations from a step's start, its marks (in order) and its end.
  template <typename Elapsed, typename Point>
  static StepTime split(const Point& start, const std::optional<Point>* marks, const Point& end,
                        Elapsed elapsed) {
    StepTime t;
    t.total_ms = elapsed(start, end);
    Point prev = start;
    for (int i = 0; i < kStepPhases; ++i) {
      if (!marks[i]) continue;
      t.split = true;
      t.phase_ms[i] = elapsed(prev, *marks[i]);
      prev = *marks[i];
    }
    return t;
  }
};

StepClock::StepClock(torch::Device device) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->runtime = &device_runtime(device);
}
StepClock::~StepClock() = default;

bool StepClock::on_device() const { return impl_->runtime->has_events(); }

void StepClock::begin() {
  if (on_device()) {
    impl_->events.emplace_back();
    impl_->events.back().begin = impl_->recorded();
    return;
  }
  for (auto& m : impl_->marks) m.reset();
  impl_->started = Impl::Clock::now();
}

void StepClock::mark(StepPhase phase) {
  const int i = static_cast<int>(phase);
  if (on_device()) {
    if (impl_->events.empty()) throw RunError("StepClock::mark without begin");
    impl_->events.back().marks[i] = impl_->recorded();
    return;
  }
  impl_->marks[i] = Impl::Clock::now();
}

void StepClock::end() {
  if (on_device()) {
    if (impl_->events.empty()) throw RunError("StepClock::end without begin");
    impl_->events.back().end = impl_->recorded();
    return;
  }
  impl_->done.push_back(Impl::split(
      impl_->started, impl_->marks, Impl::Clock::now(), [](auto a, auto b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
      }));
}

std::vector<StepTime> StepClock::take() {
  std::vector<StepTime> out;
  if (on_device()) {
    if (impl_->events.empty()) return out;
    for (const auto& e : impl_->events) {
      if (!e.begin || !e.end) throw RunError("StepClock::take: a step began without its end");
    }
    impl_->events.back().end->synchronize();  // events complete in stream order
    for (auto& e : impl_->events) {
      using P = DeviceEvent*;
      std::optional<P> marks[kStepPhases];
      for (int i = 0; i < kStepPhases; ++i) {
        if (e.marks[i]) marks[i] = e.marks[i].get();
      }
      out.push_back(Impl::split(P(e.begin.get()), marks, P(e.end.get()),
                                [](P a, P b) { return a->elapsed_ms(*b); }));
    }
    impl_->events.clear();
    return out;
  }
  out.swap(impl_->done);
  return out;
}

// ---- a capturable Adam ----------------------------------------------------------------

namespace {

// Adam and AdamW share the update; AdamW decays the weights directly
// (p *= 1 - lr * wd) instead of adding wd * p to the gradient.
template <class Base, class Options, class State>
class CapturableAdamT final : public Base, public Capturable {
 public:
  CapturableAdamT(const std::vector<torch::Tensor>& params, Options options, bool decoupled)
      : Base(params, options), decoupled_(decoupled) {}

  void before_step() override {
    torch::NoGradGuard no_grad;
    int64_t host_step = -1;
    for (auto& group : this->param_groups()) {
      for (auto& p : group.params()) {
        // Every trainable parameter, gradient or not yet: the first step's
        // state exists before its backward (and a graph's capture).
        if (!p.requires_grad()) continue;
        auto key = compat::optimizer_state_key(p);
        auto it = this->state_.find(key);
        if (it == this->state_.end()) {
          auto st = std::make_unique<State>();
          st->step(0);
          st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          it = this->state_.emplace(key, std::move(st)).first;
        }
        auto& st = static_cast<State&>(*it->second);
        if (host_step < 0) host_step = st.step();
        st.step(st.step() + 1);
      }
    }
    if (host_step < 0) return;  // nothing trainable: step() will do nothing
    const auto& first = this->param_groups().front().params().front();
    const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(first.device());
    if (!step_t_.defined()) step_t_ = torch::full({}, double(host_step), opts);
    if (lr_t_.size() != this->param_groups().size()) {
      lr_t_.clear();
      for (size_t g = 0; g < this->param_groups().size(); ++g) lr_t_.push_back(torch::zeros({}, opts));
    }
    for (size_t g = 0; g < lr_t_.size(); ++g) {
      lr_t_[g].fill_(static_cast<Options&>(this->param_groups()[g].options()).lr());
    }
  }

  torch::Tensor step(torch::optim::Optimizer::LossClosure closure) override {
    torch::NoGradGuard no_grad;
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enable_grad(true);
      loss = closure();
    }
    if (!step_t_.defined()) {
      // No gradient anywhere yet (before_step saw none): nothing to step.
      for (auto& group : this->param_groups())
        for (auto& p : group.params())
          if (p.grad().defined()) throw RunError("capturable adam: step() without before_step()");
      return loss;
    }
    step_t_.add_(1);
    for (size_t g = 0; g < this->param_groups().size(); ++g) {
      auto& group = this->param_groups()[g];
      const auto& o = static_cast<const Options&>(group.options());
      const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
      const double wd = o.weight_decay();
      // Device scalars: 1 - beta^step, lr / (1 - beta1^step), sqrt(1 - beta2^step).
      const auto step_size = lr_t_[g] / (1 - torch::pow(beta1, step_t_));
      const auto bc2_sqrt = (1 - torch::pow(beta2, step_t_)).sqrt();
      const auto decay = decoupled_ && wd != 0 ? 1 - lr_t_[g] * wd : torch::Tensor();
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& st = static_cast<State&>(*this->state_.at(compat::optimizer_state_key(p)));
        auto grad = p.grad();
        if (decay.defined()) {
          p.mul_(decay);
        } else if (wd != 0) {
          grad = grad.add(p, wd);
        }
        st.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
        st.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
        const auto denom = (st.exp_avg_sq().sqrt() / bc2_sqrt).add_(o.eps());
        p.sub_(st.exp_avg().div(denom).mul_(step_size));
      }
    }
    return loss;
  }

 private:
  bool decoupled_;
  torch::Tensor step_t_;             // optimizer steps taken, on the params' device
  std::vector<torch::Tensor> lr_t_;  // each param group's lr, on the device
};

using CapturableAdam =
    CapturableAdamT<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>;
using CapturableAdamW = CapturableAdamT<torch::optim::AdamW, torch::optim::AdamWOptions,
                                        torch::optim::AdamWParamState>;

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_capturable_adam(
    const std::vector<torch::Tensor>& params, double lr, double beta1, double beta2, double eps,
    double weight_decay, bool decoupled) {
  if (decoupled) {
    return std::make_unique<CapturableAdamW>(
        params,
        torch::optim::AdamWOptions(lr).betas({beta1, beta2}).eps(eps).weight_decay(weight_decay),
        true);
  }
  return std::make_unique<CapturableAdam>(
      params, torch::optim::AdamOptions(lr).betas({beta1, beta2}).eps(eps).weight_decay(weight_decay),
      false);
}

// ---- the graphed step -----------------------------------------------------------------

bool cuda_graphs_compiled() {
  const auto* cuda = find_device_runtime("cuda");
  return cuda != nullptr && cuda->has_graphs();
}

struct GraphedStep::Impl {
  torch::Device device{torch::kCPU};
  StepBody body;
  int warmup = GraphedStep::kDefaultWarmup;
  bool capture = true;
  data::Inputs x;  // static inputs
  torch::Tensor y;
  std::pair<torch::Tensor, torch::Tensor> out;
  int64_t calls = 0, replays = 0;
  bool captured = false;
  // The device's graph (its side stream for the warm-up, then the capture);
  // none where the device captures nothing.
  const DeviceRuntime* runtime = nullptr;
  std::unique_ptr<DeviceGraph> graph;

  DeviceGraph* device_graph() {
    if (runtime == nullptr) {
      throw RunError("runtime.cuda_graphs: this build has no device runtime for " + device.str());
    }
    if (!graph && runtime->has_graphs()) graph = runtime->make_graph(device.index());
    return graph.get();
  }

  std::pair<torch::Tensor, torch::Tensor> eager() {
    if (auto* g = device_graph()) {
      std::pair<torch::Tensor, torch::Tensor> r;
      g->run_aside([&] { r = body(x, y); });
      return r;
    }
    return body(x, y);
  }

  void capture_graph() {
    auto* g = device_graph();
    // Autocast's cast cache would hand the graph tensors cast before capture;
    // cast inside it instead (as torch.cuda.graph users are told to).
    struct NoAutocastCache {
      bool was = at::autocast::is_autocast_cache_enabled();
      NoAutocastCache() { at::autocast::set_autocast_cache_enabled(false); }
      ~NoAutocastCache() { at::autocast::set_autocast_cache_enabled(was); }
    } no_cache;
    try {
      g->capture([&] { out = body(x, y); });
    } catch (const std::exception& e) {
      graph.reset();  // a fresh graph (and side stream) for a later try
      const auto* c10e = dynamic_cast<const c10::Error*>(&e);  // without LibTorch's C++ frames
      throw RunError(std::string("runtime.cuda_graphs: capturing the train step failed: ") +
                     (c10e ? c10e->what_without_backtrace() : e.what()));
    }
    captured = true;
  }

  void replay() {
    graph->replay();
    ++replays;
  }
};

GraphedStep::GraphedStep(torch::Device device, StepBody body, int warmup, bool capture)
    : impl_(std::make_unique<Impl>()) {
  // A device this build has no runtime for fails at its first call (as its
  // tensors would); one whose runtime cannot capture is refused here.
  impl_->runtime = find_device_runtime(device.type());
  if (capture && impl_->runtime != nullptr && !impl_->runtime->has_graphs()) {
    throw ConfigError("runtime.cuda_graphs: needs runtime.accelerator \"cuda\" (graph capture "
                      "is a CUDA feature); got a " + device.str() + " device");
  }
  if (warmup < 1) throw std::invalid_argument("GraphedStep: warmup must be >= 1");
  impl_->device = device;
  impl_->body = std::move(body);
  impl_->warmup = warmup;
  impl_->capture = capture;
}
GraphedStep::~GraphedStep() = default;

bool GraphedStep::captured() const { return impl_->captured; }
int64_t GraphedStep::replays() const { return impl_->replays; }
int64_t GraphedStep::eager_calls() const {
  return impl_->capture ? impl_->warmup : std::numeric_limits<int64_t>::max();
}

std::pair<torch::Tensor, torch::Tensor> GraphedStep::run(const data::Inputs& x,
                                                         const torch::Tensor& y) {
  auto& s = *impl_;
  if (s.x.empty()) {
    for (const auto& [name, t] : x) s.x.emplace(name, torch::empty(t.sizes(), t.options().device(s.device)));
    s.y = torch::empty(y.sizes(), y.options().device(s.device));
  } else {
    bool same = s.x.size() == x.size() && s.y.sizes() == y.sizes();
    for (const auto& [name, t] : x) {
      auto it = s.x.find(name);
      same = same && it != s.x.end() && it->second.sizes() == t.sizes() &&
             it->second.scalar_type() == t.scalar_type();
    }
    if (!same) {
      auto shapes = [](const data::Inputs& in) {
        std::string out;
        for (const auto& [name, t] : in) out += (out.empty() ? "" : ", ") + name + " " + c10::str(t.sizes());
        return out;
      };
      throw RunError("runtime.cuda_graphs: the batch changed shape from " + shapes(s.x) + " to " +
                     shapes(x) +
                     " (a graph replays fixed shapes: training batches must be full, and text "
                     "padded to data.max_length with data.padding \"max_length\")");
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : x) s.x.at(name).copy_(t, /*non_blocking=*/true);
  s.y.copy_(y, /*non_blocking=*/true);
  if (!s.capture || s.calls < s.warmup) {
    ++s.calls;
    torch::AutoGradMode grad(true);
    return s.eager();
  }
  if (!s.captured) {
    torch::AutoGradMode grad(true);
    s.capture_graph();  // records the step; the replay below runs it
  }
  ++s.calls;
  s.replay();
  return s.out;
}

}  // namespace accel::train
