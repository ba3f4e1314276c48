// The schedule half of `accel-bench predict` (accel/report/predict.h): what a
// strategy sends each step, when, and what that costs a step and a run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "accel/report/predict.h"
#include "accel/util/errors.h"

namespace accel::report {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

bool is_fsdp(const std::string& s) { return s == "fsdp"; }
bool is_zero(const std::string& s) { return s == "deepspeed_stage_1" || s == "deepspeed_stage_2"; }

// Bytes of one element of what a strategy sends (lib/dist: FSDP gathers in the
// autocast dtype, Gloo sums bf16 in fp32, ZeRO gathers the parameters' dtype).
int64_t half_or(const std::string& precision, int64_t full) {
  return precision.rfind("bf16", 0) == 0 || precision.rfind("16", 0) == 0 ? 2 : full;
}

// DDP's buckets (lib/dist/ddp.cpp): parameters in reverse order, a bucket
// closed when the next would overflow it; the first 1 MiB where asked.
std::vector<int64_t> ddp_buckets(const PredictBase& b, const PredictOptions& o) {
  const int64_t cap = int64_t(o.bucket_mb * 1024 * 1024);
  const int64_t first_cap = o.small_first_bucket ? std::min<int64_t>(int64_t(1) << 20, cap) : cap;
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
  double comm_ms = 0, bytes = 0;
  int calls = 0;
  std::vector<Call>* record = nullptr;

  double duration(const Call& c) const {
    return ring_seconds(c.kind, comm.link(c.kind), ranks, c.bytes) * 1e3;
  }
  // Issues `c` now; returns when it will be done.
  double issue(const Call& c) {
    const double d = duration(c);
    comm_ms += d;
    bytes += c.bytes;
    ++calls;
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

PredictBase base_from_result(const Json& r, const std::string& file) {
  PredictBase b;
  b.name = r.value("name", file);
  if (r.value("status", "") != "ok") throw ConfigError(file + ": the run did not finish (status " + r.value("status", "?") + ")");
  const int world = r.value("world_size", 1);
  if (world != 1) {
    throw ConfigError(file + ": a run of " + std::to_string(world) +
                      " ranks; predict starts from a one-device run (its compute, unmixed with communication)");
  }
  const auto& split = r.value("step_split_ms", Json());
  if (!split.is_object()) {
    throw ConfigError(file + ": no step_split_ms (a result from before accel-bench recorded it, or a "
                      "replayed CUDA Graph): rerun it with this accel-bench");
  }
  const auto& layout = r.value("model_layout", Json());
  if (!layout.is_object()) throw ConfigError(file + ": no model_layout (rerun it with this accel-bench)");
  const auto& cfg = r.at("config");
  b.precision = cfg.at("runtime").value("precision", "32-true");
  b.device_kind = r.value("device", "cpu").rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  b.threads = r.value("threads", 0);
  b.forward_ms = split.value("forward", 0.0);
  b.backward_ms = split.value("backward", 0.0);
  b.optimizer_ms = split.value("optimizer", 0.0);
  b.other_ms = split.value("other", 0.0) + split.value("comm_wait", 0.0);
  b.measured_step_ms = r.value("step_time_ms", Json::object()).value("mean", split.value("total", 0.0));
  b.batch_per_device = cfg.at("train").value("batch_size", int64_t(1));
  b.epochs = int(r.value("epochs", Json::array()).size());
  if (b.epochs == 0) b.epochs = cfg.at("train").value("epochs", 1);
  const auto& data = r.value("data", Json::object());
  b.train_samples = data.value("train", int64_t(0));
  b.val_samples = data.value("val", int64_t(0));
  b.steps = r.value("steps", int64_t(0));
  b.train_time_s = r.value("train_time_s", 0.0);
  const int64_t timed_steps = std::max<int64_t>(0, b.steps);
  b.outside_steps_s = std::max(0.0, b.train_time_s - double(timed_steps) * b.measured_step_ms / 1e3);
  for (const auto& n : layout.at("param_numels")) b.param_numels.push_back(n.get<int64_t>());
  b.element_bytes = layout.value("element_bytes", int64_t(4));
  for (const auto& u : layout.at("units")) {
    b.units.push_back({u.value("name", ""), u.value("numel", int64_t(0)), u.value("compute_numel", int64_t(0))});
  }
  if (b.units.empty()) throw ConfigError(file + ": model_layout has no units");
  const auto& ranks = r.value("ranks", Json::array());
  if (!ranks.empty()) {
    b.param_bytes = ranks[0].value("param_bytes", int64_t(0));
    b.grad_bytes = ranks[0].value("grad_bytes", int64_t(0));
    b.optimizer_bytes = ranks[0].value("optimizer_bytes", int64_t(0));
  }
  return b;
}

PredictBase base_from_article(const Json& ref, const std::string& rung, const Json& layout,
                              const std::string& precision, const std::string& file) {
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
  b.precision = precision;
  b.device_kind = "cuda";
  b.batch_per_device = w.at("batch_per_device").get<int64_t>();
  b.train_samples = w.at("train_samples").get<int64_t>();
  b.val_samples = w.at("val_samples").get<int64_t>();
  b.epochs = r.value("epochs", w.value("epochs", 1));
  for (const auto& n : layout.at("param_numels")) b.param_numels.push_back(n.get<int64_t>());
  b.element_bytes = layout.value("element_bytes", int64_t(4));
  for (const auto& u : layout.at("units")) {
    b.units.push_back({u.value("name", ""), u.value("numel", int64_t(0)), u.value("compute_numel", int64_t(0))});
  }
  int64_t P = 0;
  for (const auto n : b.param_numels) P += n;
  const double time_s = r.at("time_min").get<double>() * 60.0;
  const int64_t S = b.train_samples / b.batch_per_device;  // drop_last
  const int64_t Sv = (b.val_samples + b.batch_per_device - 1) / b.batch_per_device;
  // The article's minutes hold the training steps and the validation passes;
  // a validation batch costs a forward, a third of a training step.
  const double T = time_s / (b.epochs * (double(S) + double(Sv) / 3.0)) * 1e3;
  const double mem = w.value("memory_GBps", 0.0);
  const double eff = w.value("optimizer_memory_efficiency", 0.7);
  // Adam reads parameter, gradient and both moments and writes three of them:
  // 28 bytes a parameter in fp32, at a share of the memory bandwidth.
  b.optimizer_ms = mem > 0 ? 28.0 * double(P) / (eff * mem * 1e9) * 1e3 : 0.0;
  b.forward_ms = (T - b.optimizer_ms) / 3.0;
  b.backward_ms = 2.0 * (T - b.optimizer_ms) / 3.0;
  b.other_ms = 0;
  b.measured_step_ms = T;
  b.steps = S * b.epochs;
  b.outside_steps_s = double(b.epochs * Sv) * b.forward_ms / 1e3;
  b.train_time_s = time_s;
  b.param_bytes = b.grad_bytes = P * 4;
  b.optimizer_bytes = P * 8;
  b.assumptions.push_back(
      "the article's " + fmt("%.2f", time_s / 60.0) + " min hold " + std::to_string(b.epochs) + " x (" +
      std::to_string(S) + " training steps + " + std::to_string(Sv) +
      " validation batches at a third of a step each): " + fmt("%.2f", T) + " ms a training step, data loading and overheads included");
  b.assumptions.push_back("of it, the optimizer " + fmt("%.2f", b.optimizer_ms) + " ms (Adam's 28 bytes a parameter at " +
                          fmt("%.0f", eff * 100) + "% of " + fmt("%.0f", mem) +
                          " GB/s), the rest forward : backward = 1 : 2 (their FLOPs)");
  return b;
}

std::vector<Call> step_calls(const PredictBase& b, const PredictOptions& o, int n) {
  std::vector<Call> calls;
  if (n <= 1) return calls;
  const auto& s = o.strategy;
  const CommModel& cm = o.nodes > 1 ? o.inter : o.intra;
  const auto rs_kind = cm.native_reduce_scatter ? Collective::ReduceScatter : Collective::AllReduce;
  const int64_t comm_bytes = half_or(b.precision, b.element_bytes);  // FSDP's gathers
  const int64_t reduce_bytes = cm.bf16_reductions ? comm_bytes : b.element_bytes;
  if (s == "ddp") {
    for (int64_t bucket : ddp_buckets(b, o)) {
      calls.push_back({Collective::AllReduce, "all_reduce", double(bucket), "backward"});
    }
  } else if (is_fsdp(s) || is_zero(s)) {
    const int U = int(b.units.size());
    const bool full = is_fsdp(s) && o.fsdp_sharding == "FULL_SHARD";
    const bool none = is_fsdp(s) && o.fsdp_sharding == "NO_SHARD";
    const auto gather = [&](int u, const char* phase, int64_t elem) {
      calls.push_back({Collective::AllGather, "all_gather", double(padded(b.units[size_t(u)].numel, n) * elem), phase});
    };
    if (is_fsdp(s) && !none) {
      for (int u = 0; u < U; ++u) gather(u, "forward", comm_bytes);
    }
    for (int u = U - 1; u >= 0; --u) {
      // FULL_SHARD gathers each unit again before its backward (the last one
      // is still gathered): with prefetch, the next one's before this one's
      // backward runs.
      if (full && o.fsdp_prefetch && u > 0) gather(u - 1, "backward", comm_bytes);
      if (full && !o.fsdp_prefetch && u < U - 1) gather(u, "backward", comm_bytes);
      const double bytes = double(padded(b.units[size_t(u)].numel, n) * reduce_bytes);
      if (none || s == "deepspeed_stage_1") {
        calls.push_back({Collective::AllReduce, "all_reduce", bytes, "backward"});
      } else {
        calls.push_back({rs_kind, "reduce_scatter", bytes, "backward"});
      }
    }
    if (is_zero(s)) {
      for (int u = 0; u < U; ++u) gather(u, "optimizer", b.element_bytes);
    }
  } else {
    throw ConfigError("--strategy: \"" + s + "\" cannot be predicted (ddp, fsdp, deepspeed_stage_1, deepspeed_stage_2)");
  }
  if (o.metrics_every_step) {  // the step's loss and the stop flag (lib/train/loop.cpp)
    calls.push_back({Collective::AllReduce, "all_reduce", 16.0, "metrics"});
  }
  return calls;
}

namespace {

// One step on n devices: its compute with the collectives placed on the timeline.
Prediction simulate(const PredictBase& b, const PredictOptions& o, int n) {
  const CommModel& cm = o.nodes > 1 ? o.inter : o.intra;
  const double k = o.compute_scale;
  const double F = b.forward_ms * k, B = b.backward_ms * k;
  const auto& s = o.strategy;
  const bool sharded_opt = n > 1 && (is_zero(s) || (is_fsdp(s) && o.fsdp_sharding != "NO_SHARD"));
  const double O = b.optimizer_ms * k / (sharded_opt ? n : 1);
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
  if (s == "ddp" || n == 1) {
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
  } else {
    // FSDP / ZeRO, unit by unit.
    std::vector<double> gathered(size_t(U), 0.0);
    const bool prefetch = o.fsdp_prefetch;
    if (next_is("forward")) {
      if (prefetch) gathered[0] = issue_next();
      for (int u = 0; u < U; ++u) {
        if (!prefetch) gathered[size_t(u)] = issue_next();
        tl.wait(gathered[size_t(u)]);
        if (prefetch && u + 1 < U) gathered[size_t(u) + 1] = issue_next();
        tl.compute(F * shares[size_t(u)]);
      }
    } else {
      tl.compute(F);
    }
    std::deque<double> in_flight;  // reductions (lib/dist/fsdp.cpp keeps at most 2)
    double done = 0;
    for (int u = U - 1; u >= 0; --u) {
      if (next_is("backward") && queue.front().kind == Collective::AllGather) {
        const int g = prefetch ? u - 1 : u;  // FULL_SHARD: gathered again before its backward
        gathered[size_t(g)] = issue_next();
      }
      if (u < U - 1) tl.wait(gathered[size_t(u)]);  // the last unit stayed gathered
      tl.compute(B * shares[size_t(u)]);
      const double r = issue_next();
      done = std::max(done, r);
      in_flight.push_back(r);
      if (in_flight.size() > 2) {
        tl.wait(in_flight.front());
        in_flight.pop_front();
      }
    }
    tl.wait(done);
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
  p.compute_ms = F + B + O + b.other_ms;
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
    if (o.nodes > 1 && n % o.nodes != 0) {
      throw ConfigError("--devices " + std::to_string(n) + " does not split over --nodes " + std::to_string(o.nodes));
    }
    Prediction p = simulate(b, o, n);
    // drop_last batches of each rank's 1/n share (lib/data/loader.cpp)
    const int64_t per_rank = (b.train_samples + n - 1) / n;
    const int64_t batches_n = per_rank / b.batch_per_device;
    const int64_t batches_1 = b.train_samples / b.batch_per_device;
    p.steps = batches_1 > 0 ? int64_t(std::llround(double(b.steps) * double(batches_n) / double(batches_1)))
                            : b.steps;
    p.train_time_s = double(p.steps) * p.step_ms / 1e3 + b.outside_steps_s / n;
    p.samples_per_s = double(n * b.batch_per_device) / (p.step_ms / 1e3);
    if (n == 1 || one_device_rate == 0) {
      const Prediction one = n == 1 ? p : simulate(b, o, 1);
      one_device_rate = double(b.batch_per_device) / (one.step_ms / 1e3);
    }
    p.efficiency = p.samples_per_s / (n * one_device_rate);
    const auto& s = o.strategy;
    const double P = double(b.param_bytes), G = double(b.grad_bytes), Op = double(b.optimizer_bytes);
    if (n == 1 || s == "ddp" || (is_fsdp(s) && o.fsdp_sharding == "NO_SHARD")) {
      p.state_bytes_per_rank = P + G + Op;
    } else if (is_fsdp(s)) {
      p.state_bytes_per_rank = (P + G + Op) / n;
    } else if (s == "deepspeed_stage_2") {
      p.state_bytes_per_rank = P + (G + Op) / n;
    } else {
      p.state_bytes_per_rank = P + G + Op / n;
    }
    if (o.price_per_device_hour) p.cost = *o.price_per_device_hour * n * p.train_time_s / 3600.0;
    rows.push_back(p);
  }
  return rows;
}

std::vector<std::string> prediction_assumptions(const PredictBase& b, const PredictOptions& o) {
  std::vector<std::string> a = b.assumptions;
  const CommModel& cm = o.nodes > 1 ? o.inter : o.intra;
  a.push_back("per device, the same batch (" + std::to_string(b.batch_per_device) +
              ") and compute as " + b.name + ": forward " + fmt("%.2f", b.forward_ms) + " + backward " +
              fmt("%.2f", b.backward_ms) + " + optimizer " + fmt("%.2f", b.optimizer_ms) +
              " + other " + fmt("%.2f", b.other_ms) + " ms" +
              (o.compute_scale != 1.0 ? ", compute x " + fmt("%.3f", o.compute_scale) + " (" + o.compute_note + ")" : ""));
  a.push_back("communication: " + cm.description +
              (o.nodes > 1 ? " between " + std::to_string(o.nodes) + " nodes (every ring hop at that link's speed)" : ""));
  a.push_back(cm.overlaps_compute
                  ? "collectives overlap compute on one channel, in the order the strategy issues them"
                  : "collectives do not overlap compute (a CPU rank's own cores move the data): every one is exposed");
  if (o.strategy == "ddp") {
    a.push_back("DDP buckets of " + fmt("%.0f", o.bucket_mb) + " MB in reverse parameter order" +
                (o.small_first_bucket ? ", the first 1 MiB" : "") +
                ", each all-reduced as soon as backward has produced it (gradients produced evenly over backward)");
  } else if (is_fsdp(o.strategy)) {
    a.push_back("FSDP " + o.fsdp_sharding + " over " + std::to_string(b.units.size()) +
                " units, compute shared by their matmul parameters" + (o.fsdp_prefetch ? ", the next unit prefetched" : "") +
                "; optimizer time / N");
  } else {
    a.push_back("ZeRO over " + std::to_string(b.units.size()) +
                " units: reductions as each unit's backward ends, the stepped shards all-gathered after the optimizer; optimizer time / N");
  }
  a.push_back("validation and the rest outside steps (" + fmt("%.1f", b.outside_steps_s) +
              " s on one device) divide by N");
  a.push_back("left out: a data pipeline that does not keep up, stragglers and skew between ranks, launch and start-up, contention on a shared network");
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
    if (priced) t += fmt(" %.2f |", *p.cost);
    t += "\n";
  }
  return t;
}

Json prediction_json(const PredictBase& b, const PredictOptions& o, const std::vector<Prediction>& rows) {
  Json j = {{"base", b.name}, {"strategy", o.strategy}, {"nodes", o.nodes},
            {"assumptions", prediction_assumptions(b, o)}, {"rows", Json::array()}};
  for (const auto& p : rows) {
    Json r = {{"devices", p.devices}, {"step_ms", p.step_ms}, {"compute_ms", p.compute_ms},
              {"exposed_comm_ms", p.exposed_comm_ms}, {"comm_ms", p.comm_ms},
              {"bytes_per_step", p.bytes_per_step}, {"calls_per_step", p.calls_per_step},
              {"steps", p.steps}, {"train_time_s", p.train_time_s}, {"samples_per_s", p.samples_per_s},
              {"efficiency", p.efficiency}, {"state_bytes_per_rank", p.state_bytes_per_rank}};
    if (p.cost) r["cost"] = *p.cost;
    j["rows"].push_back(r);
  }
  return j;
}

}  // namespace accel::report
