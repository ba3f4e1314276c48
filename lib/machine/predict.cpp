// The schedule half of `accel-bench predict` (accel/machine/predict.h): what a
// strategy sends each step, when, and what that costs a step and a run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "accel/dist/catalog.h"
#include "accel/machine/predict.h"
#include "accel/util/errors.h"
#include "accel/plan/run_plan.h"
#include "accel/precision/catalog.h"

namespace accel::machine {

std::string format_double(const char* format, double v) {
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, format, v);
  if (n < 0) return "";
  if (size_t(n) < sizeof buf) return buf;
  std::string out(size_t(n) + 1, '\0');  // longer than the buffer: never cut a sentence short
  std::snprintf(out.data(), out.size(), format, v);
  out.resize(size_t(n));
  return out;
}

namespace {

using Grads = dist::StepSchedule::Grads;

// What FSDP and ZeRO send (lib/dist/fsdp.cpp): gathers and reductions in the
// autocast dtype under a mixed precision, else the parameters' dtype (16-bit
// under bf16-true / 16-true); Gloo cannot sum bf16 and reduces it in fp32.
bool mixed(const std::string& p) {
  const auto* row = precision::find_precision(p);
  return row != nullptr && row->autocast;
}
bool bf16_comm(const std::string& p) {
  const auto* row = precision::find_precision(p);
  return row != nullptr && row->compute == "bf16";
}
int64_t comm_bytes_of(const std::string& precision, int64_t element_bytes) {
  return mixed(precision) ? 2 : element_bytes;
}
int64_t reduce_bytes_of(const std::string& precision, int64_t element_bytes, const CommModel& cm) {
  if (!cm.bf16_reductions && bf16_comm(precision)) return 4;
  return comm_bytes_of(precision, element_bytes);
}

}  // namespace

dist::StepSchedule schedule_of(const PredictOptions& o) {
  const auto* info = dist::find_strategy(o.strategy);
  if (info == nullptr || info->schedule == nullptr) {
    throw ConfigError("--strategy: \"" + o.strategy + "\" cannot be predicted (" + dist::multi_rank_strategy_list() + ")");
  }
  return info->schedule(o.knobs);
}

namespace {

// A JSON reading error as a one-line input error naming the file.
template <typename F>
auto reading(const std::string& file, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's words without its "[json.exception.type_error.302] " tag.
    std::string why = e.what();
    if (why.rfind("[json.exception.", 0) == 0 && why.find("] ") != std::string::npos) why = why.substr(why.find("] ") + 2);
    throw ConfigError(file + ": a field predict needs is missing or of the wrong type (" + why + ")");
  }
}

void read_layout(PredictBase& b, const Json& layout, const std::string& file) {
  for (const auto& n : layout.at("param_numels")) b.param_numels.push_back(n.get<int64_t>());
  b.element_bytes = layout.value("element_bytes", int64_t(4));
  for (const auto& u : layout.at("units")) {
    b.units.push_back({u.value("name", ""), u.value("numel", int64_t(0)), u.value("compute_numel", int64_t(0))});
  }
  if (b.units.empty() || b.param_numels.empty()) throw ConfigError(file + ": model_layout has no parameters or units");
}

// The run's own settings that shape its communication and its step count,
// from its config read typed (the schema's defaults) and its plan.
void read_settings(PredictBase& b, const Json& cfg, const Json& env, const std::string& file) {
  const auto rec = plan::plan_of_record(cfg, env, file);
  const auto& train = rec.config.train;
  b.precision = rec.plan.precision.row->name;
  b.batch_per_device = train.batch_size;
  if (b.batch_per_device < 1) throw ConfigError(file + ": train.batch_size " + std::to_string(b.batch_per_device));
  if (train.accumulate > 1) {
    throw ConfigError(file + ": train.accumulate " + std::to_string(train.accumulate) +
                      " (predict models steps that each reduce their gradients)");
  }
  b.limit_train_batches = train.limit_train_batches;
  b.max_steps = train.max_steps;
  b.log_every = std::max(1, train.log_every);
  b.grad_clip = train.grad_clip;
  b.knobs = rec.plan.knobs;
}

// DDP's buckets (lib/dist/ddp.cpp): parameters in reverse order, a bucket
// closed when the next would overflow it; the first 1 MiB where asked.
std::vector<int64_t> ddp_buckets(const PredictBase& b, const PredictOptions& o) {
  const int64_t cap = int64_t(o.knobs.bucket_mb * 1024 * 1024);
  const int64_t first_cap = o.knobs.small_first_bucket ? std::min<int64_t>(int64_t(1) << 20, cap) : cap;
  std::vector<int64_t> out;
  for (auto it = b.param_numels.rbegin(); it != b.param_numels.rend(); ++it) {
    const int64_t nbytes = *it * b.element_bytes;
    const int64_t limit = out.size() == 1 ? first_cap : cap;
    if (out.empty() || (out.back() > 0 && out.back() + nbytes > limit)) out.push_back(0);
    out.back() += nbytes;
  }
  return out;
}

// A unit's full (padded to N) element count.
int64_t padded(int64_t numel, int n) { return (numel + n - 1) / n * n; }

// Each unit's share of forward and backward compute (its compute_numel).
std::vector<double> compute_shares(const PredictBase& b) {
  double total = 0;
  for (const auto& u : b.units) total += double(u.compute_numel);
  std::vector<double> s;
  for (const auto& u : b.units) {
    s.push_back(total > 0 ? double(u.compute_numel) / total : 1.0 / double(b.units.size()));
  }
  return s;
}

// One step's timeline: compute on one clock, collectives queued on one
// channel in issue order.
struct Timeline {
  const CommModel& comm;
  int ranks;
  double t = 0;        // compute clock (ms)
  double channel = 0;  // the channel is busy until
  double comm_ms = 0, bytes = 0, calls = 0;
  std::vector<Call>* record = nullptr;

  // A call's time, averaged over the steps it runs in.
  double duration(const Call& c) const {
    return comm.seconds(c.kind, ranks, c.bytes) * 1e3 * c.per_step;
  }
  // Issues `c` now; returns when it will be done.
  double issue(const Call& c) {
    const double d = duration(c);
    comm_ms += d;
    bytes += c.bytes * c.per_step;
    calls += c.per_step;
    if (record) record->push_back(c);
    if (!comm.overlaps_compute) {  // the rank's own core moves the data
      t += d;
      return t;
    }
    const double start = std::max(t, channel);
    channel = start + d;
    return channel;
  }
  void wait(double done) { t = std::max(t, done); }
  void compute(double ms) { t += ms; }
};

}  // namespace

PredictBase base_from_result(const train::RunRecord& r, const std::string& file) {
  return reading(file, [&] {
    PredictBase b;
    b.name = r.name.empty() ? file : r.name;
    if (r.status != "ok") {
      throw ConfigError(file + ": the run did not finish (status " + r.status + ")");
    }
    if (r.world_size != 1) {
      throw ConfigError(file + ": a run of " + std::to_string(r.world_size) +
                        " ranks; predict starts from a one-device run (its compute, unmixed with communication)");
    }
    const auto& split = r.step_split_ms;
    if (!split.is_object()) {
      throw ConfigError(file + ": no step_split_ms (a result from before accel-bench recorded it, or a "
                        "replayed CUDA Graph): rerun it with this accel-bench");
    }
    if (!r.model_layout.is_object()) throw ConfigError(file + ": no model_layout (rerun it with this accel-bench)");
    if (!r.config.is_object()) throw ConfigError(file + ": no resolved config");
    if (!r.batch_size) throw ConfigError(file + ": no train.batch_size in its config");
    read_settings(b, r.config, r.env, file);
    const auto* row = plan::accelerator_of_device(r.device);
    b.device_kind = row != nullptr ? row->kind : "cpu";
    b.threads = r.threads;
    b.forward_ms = split.value("forward", 0.0);
    b.backward_ms = split.value("backward", 0.0);
    b.optimizer_ms = split.value("optimizer", 0.0);
    b.other_ms = split.value("other", 0.0) + split.value("comm_wait", 0.0);
    b.measured_step_ms = r.step_ms_mean.value_or(split.value("total", 0.0));
    b.epochs = r.epochs_done;
    if (b.epochs == 0) b.epochs = r.config.at("train").value("epochs", 1);
    b.train_samples = int64_t(num_at(r.data, "train").value_or(0));
    b.val_samples = int64_t(num_at(r.data, "val").value_or(0));
    b.steps = r.steps;
    b.train_time_s = r.train_time_s.value_or(0.0);
    b.outside_steps_s = std::max(0.0, b.train_time_s - double(b.steps) * b.measured_step_ms / 1e3);
    read_layout(b, r.model_layout, file);
    if (!r.ranks.empty()) {
      b.param_bytes = r.ranks[0].param_bytes;
      b.grad_bytes = r.ranks[0].grad_bytes;
      b.optimizer_bytes = r.ranks[0].optimizer_bytes;
    }
    return b;
  });
}

namespace {
PredictBase base_from_article_read(const Json& ref, const std::string& rung, const Json& layout,
                                   const Json& config, const std::string& file) {
  const auto& rungs = ref.value("rungs", Json::object());
  if (!rungs.contains(rung)) {
    std::string ids;
    for (const auto& [k, v] : rungs.items()) ids += (ids.empty() ? "" : ", ") + k;
    throw ConfigError("--rung: \"" + rung + "\" is not a rung of " + file + " (" + ids + ")");
  }
  const auto& r = rungs.at(rung);
  const auto& w = ref.value("workload", Json());
  if (!w.is_object()) throw ConfigError(file + ": no \"workload\" (the sizes predict needs)");
  if (r.value("devices", 1) != 1) {
    throw ConfigError("--rung " + rung + ": runs on " + std::to_string(r.value("devices", 1)) +
                      " devices; predict starts from a one-device rung");
  }
  PredictBase b;
  b.name = ref.value("hardware_short", "article") + " rung " + rung + " (" + r.value("name", "") + ")";
  read_settings(b, config, Json::object(), file);
  b.device_kind = "cuda";  // an article's GPU
  b.batch_per_device = w.at("batch_per_device").get<int64_t>();
  if (b.batch_per_device < 1) throw ConfigError(file + ": workload.batch_per_device must be at least 1");
  b.train_samples = w.at("train_samples").get<int64_t>();
  b.val_samples = w.at("val_samples").get<int64_t>();
  b.epochs = r.value("epochs", w.value("epochs", 1));
  read_layout(b, layout, file);
  int64_t P = 0;
  for (const auto n : b.param_numels) P += n;
  const double time_s = r.at("time_min").get<double>() * 60.0;
  const int64_t S = b.train_samples / b.batch_per_device;  // drop_last
  const int64_t Sv = (b.val_samples + b.batch_per_device - 1) / b.batch_per_device;
  // The article's minutes hold the training steps and the validation passes;
  // a validation batch costs a forward, a third of a training step.
  if (S < 1) throw ConfigError(file + ": workload: fewer training samples than a batch");
  const double T = time_s / (b.epochs * (double(S) + double(Sv) / 3.0)) * 1e3;
  const double mem = w.value("memory_GBps", 0.0);
  const double eff = w.value("optimizer_memory_efficiency", 0.7);
  // Adam reads parameter, gradient and both moments and writes three of them:
  // 28 bytes a parameter in fp32, at a share of the memory bandwidth.
  b.optimizer_ms = mem > 0 ? 28.0 * double(P) / (eff * mem * 1e9) * 1e3 : 0.0;
  if (b.optimizer_ms >= T) {
    throw ConfigError(file + ": the optimizer estimate (" + format_double("%.2f", b.optimizer_ms) +
                      " ms) is not below the step the minutes give (" + format_double("%.2f", T) + " ms)");
  }
  b.forward_ms = (T - b.optimizer_ms) / 3.0;
  b.backward_ms = 2.0 * (T - b.optimizer_ms) / 3.0;
  b.other_ms = 0;
  b.measured_step_ms = T;
  b.steps = S * b.epochs;
  b.outside_steps_s = double(b.epochs * Sv) * T / 3.0 / 1e3;
  b.train_time_s = time_s;
  b.memory_bytes_per_s = eff * mem * 1e9;  // the copies of a strategy stream as the optimizer does
  b.param_bytes = b.grad_bytes = P * 4;
  b.optimizer_bytes = P * 8;
  b.assumptions.push_back(
      "the article's " + format_double("%.2f", time_s / 60.0) + " min hold " + std::to_string(b.epochs) + " x (" +
      std::to_string(S) + " training steps + " + std::to_string(Sv) +
      " validation batches at a third of a step each): " + format_double("%.2f", T) + " ms a training step, data loading and overheads included");
  b.assumptions.push_back("of it, the optimizer " + format_double("%.2f", b.optimizer_ms) + " ms (Adam's 28 bytes a parameter at " +
                          format_double("%.0f", eff * 100) + "% of " + format_double("%.0f", mem) +
                          " GB/s), the rest forward : backward = 1 : 2 (their FLOPs)");
  return b;
}
}  // namespace

PredictBase base_from_article(const Json& ref, const std::string& rung, const Json& layout,
                              const Json& config, const std::string& file) {
  return reading(file, [&] { return base_from_article_read(ref, rung, layout, config, file); });
}

PredictOptions options_for(const PredictBase& b, const std::string& strategy) {
  PredictOptions o;
  o.strategy = strategy;
  o.knobs = b.knobs;
  // As the run plan sets them on the base's accelerator: a device's DDP
  // starts with a small bucket and reads the loss back at log steps only.
  const auto* row = plan::find_accelerator(b.device_kind);
  const bool host = row == nullptr || row->host;
  o.knobs.small_first_bucket = !host;
  o.metrics_every_step = host;
  return o;
}

std::vector<Call> step_calls(const PredictBase& b, const PredictOptions& o, int n) {
  std::vector<Call> calls;
  if (n <= 1) return calls;
  const dist::StepSchedule s = schedule_of(o);
  const CommModel& cm = o.nodes > 1 ? o.inter : o.intra;
  const auto rs_kind = cm.native_reduce_scatter ? Collective::ReduceScatter : Collective::AllReduce;
  const int64_t comm_bytes = comm_bytes_of(b.precision, b.element_bytes);
  const int64_t reduce_bytes = reduce_bytes_of(b.precision, b.element_bytes, cm);
  if (s.grads == Grads::Buckets) {
    for (int64_t bucket : ddp_buckets(b, o)) {
      calls.push_back({Collective::AllReduce, "all_reduce", double(bucket), "backward"});
    }
  } else {
    const int U = int(b.units.size());
    const bool full = s.gather_backward;
    const bool none = !s.split_units;
    const int pad = none ? 1 : n;  // NO_SHARD's flat buffer is not split
    const auto bytes_of = [&](int u, int64_t elem) { return double(padded(b.units[size_t(u)].numel, pad) * elem); };
    // Units without parameters send nothing (lib/dist/fsdp.cpp skips them).
    const auto gather = [&](int u, const char* phase, int64_t elem) {
      if (b.units[size_t(u)].numel > 0) calls.push_back({Collective::AllGather, "all_gather", bytes_of(u, elem), phase, u});
    };
    if (s.gather_forward) {
      for (int u = 0; u < U; ++u) gather(u, "forward", comm_bytes);
    }
    for (int u = U - 1; u >= 0; --u) {
      // FULL_SHARD gathers each unit again before its backward (the last one
      // is still gathered): with prefetch, the next one's before this one's
      // backward runs.
      if (full && o.knobs.fsdp_prefetch && u > 0) gather(u - 1, "backward", comm_bytes);
      if (full && !o.knobs.fsdp_prefetch && u < U - 1) gather(u, "backward", comm_bytes);
      if (b.units[size_t(u)].numel == 0) continue;
      if (s.grads == Grads::UnitAllReduce) {
        calls.push_back({Collective::AllReduce, "all_reduce", bytes_of(u, reduce_bytes), "backward", u});
      } else {
        calls.push_back({rs_kind, "reduce_scatter", bytes_of(u, reduce_bytes), "backward", u});
      }
    }
    // Clipping a sharded gradient sums its squares over the ranks (fsdp_state.cpp).
    if (b.grad_clip > 0 && !none) calls.push_back({Collective::AllReduce, "all_reduce", 8.0, "optimizer"});
    if (s.gather_after_step) {
      for (int u = 0; u < U; ++u) gather(u, "optimizer", b.element_bytes);
    }
  }
  // 16-mixed: every rank agrees whether the step overflowed (the GradScaler's found_inf).
  if (const auto* row = precision::find_precision(b.precision); row != nullptr && row->scaler) calls.push_back({Collective::AllReduce, "all_reduce", 4.0, "optimizer"});
  // The steps' losses and the stop flag (lib/train/loop.cpp): every step on a
  // CPU; on a GPU once per log step, for the steps since the last.
  if (o.metrics_every_step) {
    calls.push_back({Collective::AllReduce, "all_reduce", 16.0, "metrics"});
  } else {
    Call c{Collective::AllReduce, "all_reduce", double(b.log_every + 1) * 8.0, "metrics"};
    c.per_step = 1.0 / b.log_every;
    calls.push_back(c);
  }
  return calls;
}

CopyTraffic copy_traffic(const PredictBase& b, const PredictOptions& o, int n) {
  CopyTraffic t;
  if (n <= 1) return t;
  const dist::StepSchedule s = schedule_of(o);
  const double e = double(b.element_bytes);
  if (s.grads == Grads::Buckets) {
    double G = 0;
    for (const auto numel : b.param_numels) G += double(numel) * e;
    t.backward = 4 * G;        // each gradient into its bucket; the bucket / N
    t.after_backward = 2 * G;  // the averaged buckets back into .grad
    return t;
  }
  const CommModel& cm = o.nodes > 1 ? o.inter : o.intra;
  const double c = double(comm_bytes_of(b.precision, b.element_bytes));
  const double r = double(reduce_bytes_of(b.precision, b.element_bytes, cm));
  const bool full = s.gather_backward;
  const bool none = !s.split_units;
  const bool gathers = s.gather_forward;
  const int U = int(b.units.size());
  for (int u = 0; u < U; ++u) {
    if (b.units[size_t(u)].numel == 0) continue;  // nothing gathered or reduced
    const double P = double(padded(b.units[size_t(u)].numel, none ? 1 : n));
    const double shard = none ? P : P / n;
    t.backward += P * (e + r) + 2 * P * r;  // gradients into the flat buffer (its dtype), the buffer / N
    if (r != e) {
      t.backward += shard * (r + e);  // the reduced slice into the parameters' dtype
    } else if (s.copy_out_slice) {
      t.backward += 2 * shard * e;  // its slice of the all-reduced buffer, copied out
    }
    if (gathers && c != e) {
      // Each gather sends its shard converted and converts what it received.
      const double one = shard * (e + c) + P * (c + e);
      t.forward += one;
      if (full && u < U - 1) t.backward += one;  // gathered again for its backward (the last one stays)
    }
    if (s.gather_after_step) t.optimizer += 2 * shard * e;  // the stepped shard copied for its all-gather
  }
  return t;
}

namespace {

// The bytes an optimizer step reads and writes: parameters, gradients and
// state read, parameters and state written (Adam in fp32: 28 a parameter).
double optimizer_traffic(const PredictBase& b) {
  return 2.0 * double(b.param_bytes) + double(b.grad_bytes) + 2.0 * double(b.optimizer_bytes);
}

// One rank's optimizer step on n devices: the base's (its shard's where the
// state is sharded). Where ranks share a host, no faster than its bytes at the
// stream bandwidth each rank got with all of them streaming at once (a
// roofline: an optimizer whose arithmetic bounds it, as a one-thread Adam
// does here, is not slowed by the other ranks' traffic); without that
// bandwidth, slowed as calibrate's stream was.
double optimizer_ms(const PredictBase& b, const PredictOptions& o, int n, bool shared, bool sharded) {
  const double share = sharded ? 1.0 / n : 1.0;
  const double alone = b.optimizer_ms * o.compute_scale * share;
  if (!shared) return alone;
  const Colocation& co = o.intra.colocation;
  if (co.stream_bytes_per_s > 0 && optimizer_traffic(b) > 0) {
    const double together_bytes_per_s = co.stream_bytes_per_s / co.memory;
    return std::max(alone, optimizer_traffic(b) * share / together_bytes_per_s * 1e3);
  }
  return alone * co.memory;
}

// One step on n devices: its compute with the collectives placed on the timeline.
Prediction simulate(const PredictBase& b, const PredictOptions& o, int n) {
  const CommModel& cm = o.nodes > 1 ? o.inter : o.intra;
  const double k = o.compute_scale;
  // CPU ranks sharing a host compute slower than the one measured alone.
  const Colocation& co = o.intra.colocation;
  const bool shared = co.ranks >= 2 && (n + o.nodes - 1) / o.nodes >= 2;
  const double kc = shared ? co.compute : 1.0, km = shared ? co.memory : 1.0;
  const dist::StepSchedule s = schedule_of(o);
  // The strategy's own copies, memory-bound: at the device's bandwidth, as
  // slow as calibrate's stream ran with every rank streaming where ranks
  // share a host. No bandwidth known: none charged.
  const CopyTraffic copies = o.copy_bytes_per_s > 0 ? copy_traffic(b, o, n) : CopyTraffic{};
  const auto copy_ms = [&](double bytes) { return bytes > 0 ? bytes / o.copy_bytes_per_s * 1e3 * km : 0.0; };
  const double F = b.forward_ms * k * kc + copy_ms(copies.forward);
  const double B = b.backward_ms * k * kc + copy_ms(copies.backward);
  const double A = copy_ms(copies.after_backward);
  const bool sharded_opt = n > 1 && s.optimizer_sharded;
  const double O = optimizer_ms(b, o, n, shared, sharded_opt) + copy_ms(copies.optimizer);
  Timeline tl{cm, n};
  const auto calls = step_calls(b, o, n);
  std::deque<Call> queue(calls.begin(), calls.end());
  auto next_is = [&](const char* phase) { return !queue.empty() && queue.front().phase == phase; };
  auto issue_next = [&] {
    const double done = tl.issue(queue.front());
    queue.pop_front();
    return done;
  };
  const auto shares = compute_shares(b);
  const int U = int(b.units.size());
  if (s.grads == Grads::Buckets || n == 1) {
    tl.compute(F);
    // Buckets complete as backward produces their gradients (in bytes, evenly).
    double total = 0;
    for (const auto& c : calls) total += c.phase == "backward" ? c.bytes : 0;
    double done = 0, produced = 0, last = tl.t;
    const double start = tl.t;
    while (next_is("backward")) {
      produced += queue.front().bytes;
      const double ready = start + (total > 0 ? B * produced / total : B);
      if (cm.overlaps_compute) {
        tl.t = std::max(tl.t, ready);
      } else {
        tl.t += std::max(0.0, ready - last);
      }
      last = ready;
      done = std::max(done, issue_next());
    }
    if (cm.overlaps_compute) {
      tl.t = std::max(tl.t, start + B);
    } else {
      tl.t += std::max(0.0, start + B - last);
    }
    tl.wait(done);
    tl.compute(A);
  } else {
    // FSDP / ZeRO, unit by unit.
    std::vector<double> gathered(size_t(U), 0.0);
    const bool prefetch = o.knobs.fsdp_prefetch;
    if (next_is("forward")) {
      // Each unit's gather (units without parameters have none), the next one
      // issued as this one's forward starts when prefetching.
      const auto issue_gather = [&](int u) {
        if (next_is("forward") && queue.front().unit == u) gathered[size_t(u)] = issue_next();
      };
      if (prefetch) issue_gather(0);
      for (int u = 0; u < U; ++u) {
        if (!prefetch) issue_gather(u);
        tl.wait(gathered[size_t(u)]);
        if (prefetch && u + 1 < U) issue_gather(u + 1);
        tl.compute(F * shares[size_t(u)]);
      }
    } else {
      tl.compute(F);
    }
    std::deque<double> in_flight;  // reductions (lib/dist/fsdp.cpp keeps at most 2)
    double done = 0;
    for (int u = U - 1; u >= 0; --u) {
      if (next_is("backward") && queue.front().kind == Collective::AllGather) {
        // FULL_SHARD: gathered again before its backward (with prefetch, the next one)
        const int g = queue.front().unit;
        gathered[size_t(g)] = issue_next();
      }
      if (u < U - 1) tl.wait(gathered[size_t(u)]);  // the last unit stayed gathered
      tl.compute(B * shares[size_t(u)]);
      if (!(next_is("backward") && queue.front().unit == u)) continue;  // a unit without parameters
      const double r = issue_next();
      done = std::max(done, r);
      in_flight.push_back(r);
      if (in_flight.size() > 2) {
        tl.wait(in_flight.front());
        in_flight.pop_front();
      }
    }
    tl.wait(done);
    tl.compute(A);
  }
  const double before_opt = tl.t;
  tl.compute(O);
  double gathers = 0;
  while (next_is("optimizer")) gathers = std::max(gathers, issue_next());
  tl.wait(gathers);
  tl.compute(b.other_ms);
  while (!queue.empty()) tl.wait(issue_next());  // the metrics all-reduce
  (void)before_opt;
  Prediction p;
  p.devices = n;
  p.step_ms = tl.t;
  p.compute_ms = F + B + A + O + b.other_ms;
  p.copy_ms = copy_ms(copies.total());
  p.exposed_comm_ms = std::max(0.0, tl.t - p.compute_ms);
  p.comm_ms = tl.comm_ms;
  p.bytes_per_step = tl.bytes;
  p.calls_per_step = tl.calls;
  return p;
}

}  // namespace

std::vector<Prediction> predict(const PredictBase& b, const PredictOptions& o,
                                const std::vector<int>& device_counts) {
  if (o.nodes < 1) throw ConfigError("--nodes: must be at least 1");
  std::vector<Prediction> rows;
  double one_device_rate = 0;
  for (const int n : device_counts) {
    if (n < 1) throw ConfigError("--devices: must be at least 1");
    if (o.nodes > 1 && n > 1 && n % o.nodes != 0) {
      throw ConfigError("--devices " + std::to_string(n) + " does not split over --nodes " + std::to_string(o.nodes));
    }
    Prediction p = simulate(b, o, n);
    // drop_last batches of each rank's 1/n share (lib/data/loader.cpp), cut
    // by train.limit_train_batches and train.max_steps as the run was.
    int64_t per_epoch = ((b.train_samples + n - 1) / n) / b.batch_per_device;
    if (b.budget_fraction > 0 && b.budget_fraction < 1) {
      per_epoch = std::max<int64_t>(1, int64_t(std::floor(b.budget_fraction * double(per_epoch))));
    } else if (b.limit_train_batches > 0) {
      per_epoch = std::min(per_epoch, b.limit_train_batches);
    }
    p.steps = per_epoch * b.epochs;
    if (b.max_steps > 0) p.steps = std::min(p.steps, b.max_steps);
    p.train_time_s = double(p.steps) * p.step_ms / 1e3 + b.outside_steps_s / n;
    p.samples_per_s = double(n * b.batch_per_device) / (p.step_ms / 1e3);
    if (n == 1 || one_device_rate == 0) {
      const Prediction one = n == 1 ? p : simulate(b, o, 1);
      one_device_rate = double(b.batch_per_device) / (one.step_ms / 1e3);
    }
    p.efficiency = p.samples_per_s / (n * one_device_rate);
    const dist::StepSchedule s = schedule_of(o);
    const double P = double(b.param_bytes), G = double(b.grad_bytes), Op = double(b.optimizer_bytes);
    const auto per_rank = [&](double bytes, bool sharded) { return n > 1 && sharded ? bytes / n : bytes; };
    p.state_bytes_per_rank =
        per_rank(P, s.params_sharded) + per_rank(G, s.grads_sharded) + per_rank(Op, s.optimizer_sharded);
    if (o.price_per_device_hour) p.cost = *o.price_per_device_hour * n * p.train_time_s / 3600.0;
    rows.push_back(p);
  }
  return rows;
}

std::vector<std::string> prediction_assumptions(const PredictBase& b, const PredictOptions& o) {
  std::vector<std::string> a = b.assumptions;
  const CommModel& cm = o.nodes > 1 ? o.inter : o.intra;
  a.push_back("per device, the same batch (" + std::to_string(b.batch_per_device) +
              ") and compute as " + b.name + ": forward " + format_double("%.2f", b.forward_ms) + " + backward " +
              format_double("%.2f", b.backward_ms) + " + optimizer " + format_double("%.2f", b.optimizer_ms) +
              " + other " + format_double("%.2f", b.other_ms) + " ms" +
              (o.compute_scale != 1.0 ? ", compute x " + format_double("%.3f", o.compute_scale) + " (" + o.compute_note + ")" : ""));
  if (o.intra.colocation.ranks >= 2) {
    const auto& co = o.intra.colocation;
    const std::string opt =
        co.stream_bytes_per_s > 0 && optimizer_traffic(b) > 0
            ? "the optimizer no faster than its " + format_double("%.0f", optimizer_traffic(b) / 1e6) +
                  " MB read and written at the " + format_double("%.1f", co.stream_bytes_per_s / co.memory / 1e9) +
                  " GB/s a rank the stream got with all streaming (its shard's under FSDP and ZeRO)"
            : "optimizer x " + format_double("%.3f", co.memory) + " (a stream over large buffers)";
    a.push_back("ranks sharing a host (2 or more a node) compute slower than one alone, as calibrate measured " +
                std::to_string(co.ranks) + " ranks at once: forward and backward x " + format_double("%.3f", co.compute) +
                " (a matmul loop), " + opt + "; more ranks a host than that may slow more");
  }
  a.push_back("communication: " + cm.description +
              (o.nodes > 1 ? " between " + std::to_string(o.nodes) + " nodes (every ring hop at that link's speed)" : ""));
  a.push_back(cm.overlaps_compute
                  ? "collectives overlap compute on one channel, in the order the strategy issues them"
                  : "collectives do not overlap compute (a CPU rank's own cores move the data): every one is exposed");
  const dist::StepSchedule s = schedule_of(o);
  if (s.grads == Grads::Buckets) {
    a.push_back(s.description + (o.knobs.small_first_bucket ? ", the first 1 MiB" : "") +
                ", each all-reduced as soon as backward has produced it (gradients produced evenly over backward)");
  } else if (!s.gather_after_step) {
    a.push_back(s.description + " over " + std::to_string(b.units.size()) +
                " units, compute shared by their matmul parameters" + (o.knobs.fsdp_prefetch ? ", the next unit prefetched" : "") +
                "; optimizer time / N");
  } else {
    a.push_back(s.description + " over " + std::to_string(b.units.size()) +
                " units: reductions as each unit's backward ends, the stepped shards all-gathered after the optimizer; optimizer time / N");
  }
  const bool copies = o.copy_bytes_per_s > 0;
  if (copies) {
    const int n = b.device_kind == "cpu" && o.intra.colocation.ranks >= 2 ? o.intra.colocation.ranks : 2;
    a.push_back("the strategy's own copies (" +
                std::string(s.grads == Grads::Buckets ? "gradients into the buckets, / N, and back into .grad"
                                                : "gradients into the flat buffers and / N, 16-bit gathers converted, stepped shards copied") +
                "): " + format_double("%.1f", copy_traffic(b, o, n).total() / 1e6) + " MB read and written a step at " +
                std::to_string(n) + " devices, at " + format_double("%.1f", o.copy_bytes_per_s / 1e9) + " GB/s (" +
                o.copy_note + ")" +
                (o.intra.colocation.ranks >= 2 ? ", / " + format_double("%.3f", o.intra.colocation.memory) +
                                                     " where ranks share a host (the stream with every rank streaming)"
                                               : ""));
  }
  a.push_back("validation and the rest outside steps (" + format_double("%.1f", b.outside_steps_s) +
              " s on one device) divide by N");
  a.push_back(std::string("left out: a data pipeline that does not keep up, stragglers and skew between ranks, ") +
              (copies ? "" : "the strategies' own copies of the gradients into and out of their buffers (no memory bandwidth known for these devices), ") +
              "collectives slowed by the compute sharing their cores (CPU), launch and start-up, contention on a shared network");
  return a;
}

std::string prediction_table(const PredictBase& b, const std::vector<Prediction>& rows) {
  const bool priced = !rows.empty() && rows.front().cost.has_value();
  std::string t = "| devices | step ms | exposed comm ms | MB sent a step | train time | samples/s | scaling efficiency | model state per rank |" +
                  std::string(priced ? " cost |" : "") + "\n|---|---|---|---|---|---|---|---|" +
                  std::string(priced ? "---|" : "") + "\n";
  (void)b;
  for (const auto& p : rows) {
    char line[400];
    std::snprintf(line, sizeof line, "| %d | %.2f | %.2f | %.2f | %.2f min | %.1f | %.0f%% | %.1f MB |", p.devices,
                  p.step_ms, p.exposed_comm_ms, p.bytes_per_step / 1e6, p.train_time_s / 60.0,
                  p.samples_per_s, p.efficiency * 100, p.state_bytes_per_rank / 1e6);
    t += line;
    if (priced) t += format_double(" %.2f |", *p.cost);
    t += "\n";
  }
  return t;
}

Json prediction_json(const PredictBase& b, const PredictOptions& o, const std::vector<Prediction>& rows) {
  Json j = {{"base", b.name}, {"strategy", o.strategy}, {"nodes", o.nodes},
            {"assumptions", prediction_assumptions(b, o)}, {"rows", Json::array()}};
  for (const auto& p : rows) {
    Json r = {{"devices", p.devices}, {"step_ms", p.step_ms}, {"compute_ms", p.compute_ms},
              {"exposed_comm_ms", p.exposed_comm_ms}, {"comm_ms", p.comm_ms}, {"copy_ms", p.copy_ms},
              {"bytes_per_step", p.bytes_per_step}, {"calls_per_step", p.calls_per_step},
              {"steps", p.steps}, {"train_time_s", p.train_time_s}, {"samples_per_s", p.samples_per_s},
              {"efficiency", p.efficiency}, {"state_bytes_per_rank", p.state_bytes_per_rank}};
    if (p.cost) r["cost"] = *p.cost;
    j["rows"].push_back(r);
  }
  return j;
}

}  // namespace accel::machine
