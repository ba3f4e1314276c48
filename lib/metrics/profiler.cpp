#include "accel/metrics/profiler.h"

#include <cstdio>

#include "accel/metrics/metrics.h"

#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "accel/util/json.h"

#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

namespace accel::metrics {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// One op call for the chrome trace (named: State, a member of a class with
// linkage, holds them).
struct TraceEvent {
  std::string name;
  int64_t start_ns, dur_ns;
  uint64_t tid;
};

struct OpProfiler::State {
  std::mutex mu;
  std::map<std::string, OpStat> ops;
  std::unordered_map<std::string, double> outer_us;  // outermost calls per name
  std::vector<TraceEvent> trace;
  int64_t dropped = 0;
  int64_t origin_ns = 0;
  at::CallbackHandle handle = 0;
  bool running = false;
  static constexpr size_t kMaxTrace = 500000;
};

namespace {

// The one recording profiler (callbacks are plain function pointers).
std::mutex g_active_mu;
std::shared_ptr<OpProfiler::State> g_active;

struct Frame {
  std::string name;
  int64_t start_ns;
  int64_t child_ns = 0;
};
thread_local std::vector<Frame> t_stack;

uint64_t thread_key() { return std::hash<std::thread::id>()(std::this_thread::get_id()); }

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  t_stack.push_back({fn.name() ? fn.name() : "?", now_ns(), 0});
  return nullptr;
}

void on_exit(const at::RecordFunction& /*fn*/, at::ObserverContext* /*ctx*/) {
  if (t_stack.empty()) return;  // started before the profiler
  Frame f = std::move(t_stack.back());
  t_stack.pop_back();
  const int64_t end = now_ns();
  const int64_t total = end - f.start_ns;
  if (!t_stack.empty()) t_stack.back().child_ns += total;
  std::shared_ptr<OpProfiler::State> s;
  {
    std::lock_guard<std::mutex> lk(g_active_mu);
    s = g_active;
  }
  if (!s) return;
  std::lock_guard<std::mutex> lk(s->mu);
  auto& op = s->ops[f.name];
  op.name = f.name;
  ++op.calls;
  op.self_us += double(total - f.child_ns) / 1e3;
  op.total_us += double(total) / 1e3;
  bool outermost = true;
  for (const auto& g : t_stack) outermost = outermost && g.name != f.name;
  if (outermost) s->outer_us[f.name] += double(total) / 1e3;
  if (s->trace.size() < OpProfiler::State::kMaxTrace) {
    s->trace.push_back({std::move(f.name), f.start_ns - s->origin_ns, total, thread_key()});
  } else {
    ++s->dropped;
  }
}

}  // namespace

OpProfiler::OpProfiler() : state_(std::make_shared<State>()) {}
OpProfiler::~OpProfiler() {
  try {
    stop();
  } catch (...) {
  }
}

bool OpProfiler::running() const { return state_->running; }

void OpProfiler::start() {
  if (state_->running) return;
  {
    std::lock_guard<std::mutex> lk(g_active_mu);
    if (g_active) throw RunError("OpProfiler: another profiler is recording");
    g_active = state_;
  }
  state_->origin_ns = now_ns();
  state_->handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_enter, &on_exit)
          .needsInputs(false)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                   at::RecordScope::USER_SCOPE}));
  state_->running = true;
}

void OpProfiler::stop() {
  if (!state_->running) return;
  at::removeCallback(state_->handle);
  std::lock_guard<std::mutex> lk(g_active_mu);
  if (g_active == state_) g_active.reset();
  state_->running = false;
}

double StepCounts::matmul_flops() const {
  double sum = 0;
  for (const auto& [name, f] : flops) sum += f;
  return sum;
}

struct StepCounter::State {
  std::mutex mu;
  StepCounts counts;
  at::CallbackHandle handle = 0;
  bool running = false;
};

namespace {

std::mutex g_counter_mu;
std::shared_ptr<StepCounter::State> g_counter;

std::vector<int64_t> shape_at(c10::ArrayRef<const c10::IValue> in, size_t i) {
  if (i < in.size() && in[i].isTensor() && in[i].toTensor().defined()) return in[i].toTensor().sizes().vec();
  return {};
}

double product(const std::vector<int64_t>& v, size_t from) {
  double p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= double(v[i]);
  return p;
}

// What the start callback leaves for the end: the call's FLOPs where its
// inputs decide them, or the weight's shape where the output does (a
// convolution). The inputs must be read at the start: the dispatcher frees
// the boxed arguments right after the start callbacks run.
//
// An op called from inside itself is one call: autocast's kernel for an op on
// its cast list (aten::addmm, aten::matmul, aten::linear, ...) casts the
// inputs and calls the same op again below the autocast key, and both calls
// pass the dispatcher's RecordFunction. The outer one is counted (the same
// shapes), the inner one, whose parent is an op of its own name, is not.
struct CountContext : at::ObserverContext {
  std::string name;
  double flops = 0;
  std::vector<int64_t> conv_weight;  // aten::convolution: read the output at the end
  size_t depth = 0;                  // this thread's open ops when it started
  bool nested = false;               // called from an op of its own name: not counted
};
// The names of this thread's ops that the counter saw start and not yet end,
// outermost first (names, not contexts: an op that ends on another thread
// leaves no dangling pointer, only an entry the next end at its depth drops).
thread_local std::vector<std::string> t_open;

// FLOPs of one call of a matmul-class op from its inputs; 0 for every other op.
double input_flops(const std::string& name, c10::ArrayRef<const c10::IValue> in) {
  auto mm = [&](size_t a_at, size_t b_at) {
    const auto a = shape_at(in, a_at), b = shape_at(in, b_at);
    if (a.size() == 2 && b.size() == 2) return 2.0 * double(a[0]) * double(a[1]) * double(b[1]);
    if (a.size() == 3 && b.size() == 3) return 2.0 * double(a[0]) * double(a[1]) * double(a[2]) * double(b[2]);
    return 0.0;
  };
  if (name == "aten::mm" || name == "aten::bmm") return mm(0, 1);
  if (name == "aten::addmm" || name == "aten::baddbmm") return mm(1, 2);
  if (name == "aten::convolution_backward") {
    const auto go = shape_at(in, 0), w = shape_at(in, 2);
    if (w.size() < 3 || go.empty()) return 0.0;
    const double one = 2.0 * product(go, 0) * product(w, 1);
    int grads = 2;  // input and weight gradients, unless the mask says fewer
    if (in.size() > 10 && in[10].isBoolList()) {
      const auto mask = in[10].toBoolList();
      grads = (mask.size() > 0 && mask.get(0) ? 1 : 0) + (mask.size() > 1 && mask.get(1) ? 1 : 0);
    }
    return one * grads;
  }
  // LibTorch 2.x's fused attention kernels (flash, memory-efficient, cuDNN,
  // the CPU flash one), not the composite scaled_dot_product_attention nor
  // the math fallback, whose bmm calls count themselves: Q K^T and P V
  // forward, four such products backward (recomputation not counted).
  if (name.rfind("aten::_scaled_dot_product_", 0) == 0 && name.find("attention") != std::string::npos &&
      name.find("_math") == std::string::npos) {
    const bool backward = name.size() > 9 && name.compare(name.size() - 9, 9, "_backward") == 0;
    const auto q = shape_at(in, backward ? 1 : 0), k = shape_at(in, backward ? 2 : 1);
    if (q.size() != 4 || k.size() != 4) return 0.0;  // [B, H, S, D]
    const double bhssd = double(q[0]) * double(q[1]) * double(q[2]) * double(k[2]) * double(q[3]);
    return (backward ? 8.0 : 4.0) * bhssd;
  }
  if (name == "accel::fused_attention" || name == "accel::fused_attention_backward") {
    const auto qkv = shape_at(in, 0);  // [B, S, 3 D]
    if (qkv.size() != 3) return 0.0;
    const double bssd = double(qkv[0]) * double(qkv[1]) * double(qkv[1]) * double(qkv[2] / 3);
    return (name == "accel::fused_attention" ? 4.0 : 8.0) * bssd;
  }
  return 0.0;
}

std::unique_ptr<at::ObserverContext> count_enter(const at::RecordFunction& fn) {
  auto ctx = std::make_unique<CountContext>();
  ctx->name = fn.name() ? fn.name() : "?";
  ctx->depth = t_open.size();
  ctx->nested = !t_open.empty() && t_open.back() == ctx->name;
  t_open.push_back(ctx->name);
  if (ctx->nested) return ctx;
  if (ctx->name == "aten::convolution") {
    ctx->conv_weight = shape_at(fn.inputs(), 1);
  } else {
    ctx->flops = input_flops(ctx->name, fn.inputs());
  }
  return ctx;
}

void count_exit(const at::RecordFunction& fn, at::ObserverContext* ctx_base) {
  auto* ctx = static_cast<CountContext*>(ctx_base);
  if (ctx != nullptr && t_open.size() > ctx->depth) t_open.resize(ctx->depth);
  if (ctx != nullptr && ctx->nested) return;
  std::shared_ptr<StepCounter::State> s;
  {
    std::lock_guard<std::mutex> lk(g_counter_mu);
    s = g_counter;
  }
  if (!s) return;
  const std::string name = ctx != nullptr ? ctx->name : (fn.name() ? fn.name() : "?");
  double f = ctx != nullptr ? ctx->flops : 0.0;
  if (ctx != nullptr && ctx->conv_weight.size() >= 3) {
    const auto& out = fn.outputs();
    if (!out.empty() && out[0].isTensor()) {
      f = 2.0 * double(out[0].toTensor().numel()) * product(ctx->conv_weight, 1);
    }
  }
  std::lock_guard<std::mutex> lk(s->mu);
  ++s->counts.calls[name];
  if (f > 0) s->counts.flops[name] += f;
}

}  // namespace

StepCounter::StepCounter() : state_(std::make_shared<State>()) {}
StepCounter::~StepCounter() {
  try {
    stop();
  } catch (...) {
  }
}

bool StepCounter::running() const { return state_->running; }

void StepCounter::start() {
  if (state_->running) return;
  {
    std::lock_guard<std::mutex> lk(g_counter_mu);
    if (g_counter) throw RunError("StepCounter: another counter is counting");
    g_counter = state_;
  }
  state_->counts = StepCounts{};
  t_open.clear();  // what an earlier count left open (it stopped inside an op)
  // Thread-local, so a loader's prefetch thread collating the next batch is
  // not counted in this step; autograd's engine carries the callback to the
  // threads that run this step's backward.
  state_->handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&count_enter, &count_exit)
                                             .needsInputs(true)
                                             .needsOutputs(true)
                                             .scopes({at::RecordScope::FUNCTION}));
  state_->running = true;
}

StepCounts StepCounter::stop() {
  if (!state_->running) return state_->counts;
  at::removeCallback(state_->handle);
  {
    std::lock_guard<std::mutex> lk(g_counter_mu);
    if (g_counter == state_) g_counter.reset();
  }
  state_->running = false;
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->counts;
}

// ---- tensor allocations of one step (CPU) ----------------------------------------------

namespace {

// A block the wrapper handed out: its size, the deleter it came with, and
// whether its allocation was counted.
struct CountedBlock {
  size_t bytes = 0;
  c10::DeleterFnPtr deleter = nullptr;
  bool counted = false;
};

struct AllocationTally {
  std::mutex mu;
  std::unordered_map<void*, CountedBlock> blocks;  // handed out by the wrapper, not yet freed
  int64_t allocations = 0, bytes = 0, live = 0, peak = 0;
};

// Never destroyed: a block the wrapper handed out may be freed at exit.
AllocationTally& tally() {
  static auto* t = new AllocationTally();
  return *t;
}

thread_local bool t_count_allocations = false;

// The deleter of every block the wrapper handed out (also after it was
// uninstalled): forgets the block, then frees it as its allocator would.
void counted_delete(void* ctx) {
  c10::DeleterFnPtr deleter = nullptr;
  {
    auto& t = tally();
    std::lock_guard<std::mutex> lk(t.mu);
    const auto it = t.blocks.find(ctx);
    if (it == t.blocks.end()) return;  // a null block (zero bytes): nothing to free
    deleter = it->second.deleter;
    if (it->second.counted) t.live -= int64_t(it->second.bytes);
    t.blocks.erase(it);
  }
  deleter(ctx);
}

// c10's CPU allocator, with each allocation's deleter swapped for
// counted_delete (DataPtr::compare_exchange_deleter: the data, the context
// and the memory stay the allocator's).
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(size_t n) ACCEL_ALLOCATE_CONST override {
    c10::DataPtr d = inner_->allocate(n);
    void* ctx = d.get_context();
    const c10::DeleterFnPtr deleter = d.get_deleter();
    if (ctx == nullptr || deleter == nullptr || !d.compare_exchange_deleter(deleter, &counted_delete)) {
      return d;
    }
    auto& t = tally();
    std::lock_guard<std::mutex> lk(t.mu);
    CountedBlock& b = t.blocks[ctx];
    b.bytes = n;
    b.deleter = deleter;
    b.counted = t_count_allocations;
    if (b.counted) {
      ++t.allocations;
      t.bytes += int64_t(n);
      t.live += int64_t(n);
      t.peak = std::max(t.peak, t.live);
    }
    return d;
  }
  // raw_allocate/raw_deallocate: every block handed out carries
  // counted_delete, which frees one it did not hand out never.
  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }
  ACCEL_ALLOCATOR_COPY_DATA

  c10::Allocator* inner() const { return inner_; }

 private:
  c10::Allocator* inner_;
};

std::mutex g_alloc_counter_mu;
CountingCpuAllocator* g_counting_allocator = nullptr;  // installed while a counter counts

}  // namespace

CpuAllocationCounter::~CpuAllocationCounter() {
  try {
    stop();
  } catch (...) {
  }
}

void CpuAllocationCounter::start() {
  if (running_) return;
  std::lock_guard<std::mutex> lk(g_alloc_counter_mu);
  if (g_counting_allocator != nullptr) throw RunError("CpuAllocationCounter: another counter is counting");
  c10::Allocator* inner = c10::GetCPUAllocator();
  auto* wrapper = new CountingCpuAllocator(inner);  // kept: blocks it handed out outlive it
  c10::SetCPUAllocator(wrapper, /*priority=*/0);
  installed_ = c10::GetCPUAllocator() == wrapper;
  {
    auto& t = tally();
    std::lock_guard<std::mutex> tl(t.mu);
    t.allocations = t.bytes = t.live = t.peak = 0;
    for (auto& [ctx, b] : t.blocks) b.counted = false;  // an earlier count's blocks still live
  }
  g_counting_allocator = installed_ ? wrapper : nullptr;
  if (!installed_) delete wrapper;
  t_count_allocations = installed_;
  running_ = true;
}

std::optional<AllocationCounts> CpuAllocationCounter::stop() {
  if (!running_) return std::nullopt;
  running_ = false;
  t_count_allocations = false;
  std::lock_guard<std::mutex> lk(g_alloc_counter_mu);
  if (!installed_) return std::nullopt;
  c10::SetCPUAllocator(g_counting_allocator->inner(), /*priority=*/0);
  g_counting_allocator = nullptr;  // the wrapper object is leaked on purpose (see start)
  installed_ = false;
  auto& t = tally();
  std::lock_guard<std::mutex> tl(t.mu);
  AllocationCounts c;
  c.allocations = t.allocations;
  c.bytes = t.bytes;
  c.peak_bytes = t.peak;
  c.source = "c10 CPU allocator, the step's thread";
  return c;
}

std::vector<OpStat> OpProfiler::table() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  std::vector<OpStat> out;
  for (const auto& [name, op] : state_->ops) out.push_back(op);
  std::sort(out.begin(), out.end(),
            [](const OpStat& a, const OpStat& b) { return a.self_us > b.self_us; });
  return out;
}

double OpProfiler::total_us(const std::string& name) const {
  std::lock_guard<std::mutex> lk(state_->mu);
  const auto it = state_->outer_us.find(name);
  return it == state_->outer_us.end() ? 0.0 : it->second;
}

int64_t OpProfiler::events() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return int64_t(state_->trace.size()) + state_->dropped;
}

int64_t OpProfiler::dropped_events() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->dropped;
}

std::string OpProfiler::chrome_trace() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  // Threads numbered in order of appearance (the main thread first).
  std::unordered_map<uint64_t, int> tids;
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : state_->trace) {
    auto it = tids.emplace(e.tid, int(tids.size())).first;
    events.push_back({{"name", e.name},
                      {"ph", "X"},
                      {"ts", double(e.start_ns) / 1e3},
                      {"dur", double(e.dur_ns) / 1e3},
                      {"pid", 0},
                      {"tid", it->second}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

std::string op_table_csv(const std::vector<OpStat>& ops) {
  double all = 0;
  for (const auto& o : ops) all += o.self_us;
  std::ostringstream out;
  out << "name,calls,self_us,total_us,self_share\n";
  for (const auto& o : ops) {
    std::string name = o.name;
    if (name.find_first_of(",\"") != std::string::npos) {
      std::string q = "\"";
      for (char c : name) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      name = q + "\"";
    }
    char line[160];
    std::snprintf(line, sizeof(line), ",%lld,%.1f,%.1f,%.4f\n", static_cast<long long>(o.calls),
                  o.self_us, o.total_us, all > 0 ? o.self_us / all : 0.0);
    out << name << line;
  }
  return out.str();
}

std::string op_table_text(const std::vector<OpStat>& ops, size_t rows) {
  double all = 0;
  for (const auto& o : ops) all += o.self_us;
  std::ostringstream out;
  char line[200];
  std::snprintf(line, sizeof(line), "%-44s %8s %12s %7s %12s\n", "op", "calls", "self ms",
                "self %", "total ms");
  out << line;
  for (size_t i = 0; i < ops.size() && i < rows; ++i) {
    const auto& o = ops[i];
    std::string name = o.name.size() > 44 ? o.name.substr(0, 41) + "..." : o.name;
    std::snprintf(line, sizeof(line), "%-44s %8lld %12.2f %6.1f%% %12.2f\n", name.c_str(),
                  static_cast<long long>(o.calls), o.self_us / 1e3,
                  all > 0 ? 100.0 * o.self_us / all : 0.0, o.total_us / 1e3);
    out << line;
  }
  return out.str();
}

std::string write_step_profile(const OpProfiler& profiler, int64_t steps, int64_t first_step,
                               const std::filesystem::path& dir) {
  const auto ops = profiler.table();
  const double n = double(std::max<int64_t>(steps, 1));
  auto ms = [&](const char* scope) { return profiler.total_us(scope) / 1e3 / n; };
  const double step = ms("accel::step"), fwd = ms("accel::forward"), bwd = ms("accel::backward"),
               opt = ms("accel::optimizer"), graph = ms("accel::graph_replay"),
               data = ms("accel::data");
  const double inside = fwd + bwd + opt + graph;
  const double outside = std::max(0.0, step - inside);
  char line[512];
  std::snprintf(line, sizeof(line),
                "== profile: %lld steps from step %lld, per step: %.2f ms = forward %.2f + backward "
                "%.2f + optimizer %.2f%s + outside %.2f (%.1f%%: metrics, logging, copies); "
                "waiting for data %.2f ms before it",
                static_cast<long long>(steps), static_cast<long long>(first_step), step, fwd,
                bwd, opt, graph > 0 ? (" + graph replay " + std::to_string(graph)).c_str() : "",
                outside, step > 0 ? 100.0 * outside / step : 0.0, data);
  std::string summary = std::string(line) + "\n";
  summary += "(host time; on a GPU kernels run asynchronously, so these times are launch "
             "and sync time, not kernel time)\n\n";
  summary += op_table_text(ops, 30);
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "ops.csv", op_table_csv(ops));
  write_file_atomic(dir / "ops.txt", op_table_text(ops, ops.size()));
  write_file_atomic(dir / "trace.json", profiler.chrome_trace());
  write_file_atomic(dir / "summary.txt", summary);
  return std::string(line) + "\n" + op_table_text(ops, 12) + "== profile written to " +
         dir.string() + " (ops.txt, ops.csv, trace.json, summary.txt)";
}

}  // namespace accel::metrics
