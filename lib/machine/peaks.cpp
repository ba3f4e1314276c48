#include "accel/machine/peaks.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "accel/build_info.h"
#include "accel/plan/accelerator.h"
#include "accel/precision/catalog.h"
#include "accel/metrics/metrics.h"
#include "accel/util/errors.h"

namespace fs = std::filesystem;

namespace accel::machine {
namespace {

std::vector<std::string> tokens(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : text + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur += char(std::toupper(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  return out;
}

// Every token of the pattern is a whole token of the name: "L4" matches
// "NVIDIA L4" but not "NVIDIA L40S".
bool matches(const std::string& name, const Json& pattern) {
  const auto have = tokens(name);
  if (!pattern.is_array() || pattern.empty()) return false;
  for (const auto& p : pattern) {
    if (!p.is_string()) return false;
    for (const auto& t : tokens(p.get<std::string>())) {
      bool found = false;
      for (const auto& h : have) found = found || h == t;
      if (!found) return false;
    }
  }
  return true;
}

std::string gflops_text(double flops) {
  char buf[64];
  if (flops >= 1e12) {
    std::snprintf(buf, sizeof(buf), "%.1f TFLOP/s", flops / 1e12);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f GFLOP/s", flops / 1e9);
  }
  return buf;
}

Json load_if(const fs::path& file) {
  if (file.empty() || !fs::exists(file)) return nullptr;
  return read_json_file(file);
}

[[noreturn]] void bad_field(const std::string& file, const std::string& field, const std::string& what,
                            const Json& got) {
  std::string shown = got.dump();
  if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
  throw ConfigError(file + ": " + field + ": " + what + " (got " + shown + ")");
}

// A measured figure: > 0 (or >= 0), finite, and at most `most` (a fit of
// 1e300 s would predict infinite steps).
void positive(const Json& v, const std::string& file, const std::string& field, bool zero_ok = false,
              double most = 1e300) {
  if (!v.is_number() || !(zero_ok ? v.get<double>() >= 0 : v.get<double>() > 0) ||
      !std::isfinite(v.get<double>())) {
    bad_field(file, field, zero_ok ? "must be a number >= 0" : "must be a number > 0", v);
  }
  if (v.get<double>() > most) {
    char what[48];
    std::snprintf(what, sizeof what, "must be at most %g", most);
    bad_field(file, field, what, v);
  }
}

}  // namespace

std::string matmul_dtype(const std::string& precision) {
  const auto* row = precision::find_precision(precision);
  return row ? row->compute : "fp32";
}

std::optional<int> thread_count_key(const std::string& key) {
  if (key.empty() || key.size() > 6 || key.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const long n = std::strtol(key.c_str(), nullptr, 10);
  if (n < 1 || n > kMaxCalibratedThreads) return std::nullopt;
  return int(n);
}

void validate_calibration(const Json& doc, const std::string& file) {
  if (!doc.is_object()) bad_field(file, "(the file)", "must be a JSON object", doc);
  if (doc.contains("cpu")) {
    const auto& cpu = doc["cpu"];
    if (!cpu.is_object()) bad_field(file, "cpu", "must be an object of dtypes", cpu);
    for (const auto& [dtype, table] : cpu.items()) {
      if (!table.is_object()) bad_field(file, "cpu." + dtype, "must be an object of thread counts", table);
      for (const auto& [threads, gflops] : table.items()) {
        if (!thread_count_key(threads)) {
          bad_field(file, "cpu." + dtype + "." + threads,
                    "must be a thread count from 1 to " + std::to_string(kMaxCalibratedThreads), threads);
        }
        positive(gflops, file, "cpu." + dtype + "." + threads, false, 1e9);  // GFLOP/s: an exaflop is no CPU
      }
    }
  }
  if (!doc.contains("comm")) return;
  const auto& comm = doc["comm"];
  if (!comm.is_object()) bad_field(file, "comm", "must be an object", comm);
  if (!comm.contains("ranks") || !comm["ranks"].is_number_integer() || comm["ranks"].get<int64_t>() < 2) {
    bad_field(file, "comm.ranks", "must be an integer >= 2", comm.value("ranks", Json()));
  }
  if (comm.contains("backend") && !comm["backend"].is_string()) {
    bad_field(file, "comm.backend", "must be a string", comm["backend"]);
  }
  if (comm.contains("threads_per_rank") && !comm["threads_per_rank"].is_number_integer()) {
    bad_field(file, "comm.threads_per_rank", "must be an integer", comm["threads_per_rank"]);
  }
  const auto& cs = comm.value("collectives", Json());
  if (!cs.is_object()) bad_field(file, "comm.collectives", "must be an object", cs);
  for (const auto& [name, c] : cs.items()) {
    const std::string at = "comm.collectives." + name;
    if (!c.is_object()) bad_field(file, at, "must be an object", c);
    for (const char* k : {"alpha_s", "beta_s_per_byte"}) {
      // Latency at most 10 s, bandwidth at least 1 kB/s: beyond, no link.
      if (c.contains(k)) positive(c[k], file, at + "." + k, /*zero_ok=*/true, std::string(k) == "alpha_s" ? 10.0 : 1e-3);
    }
    if (!c.contains("points")) continue;
    if (!c["points"].is_array()) bad_field(file, at + ".points", "must be a list of [bytes, seconds]", c["points"]);
    for (size_t i = 0; i < c["points"].size(); ++i) {
      const auto& pt = c["points"][i];
      const std::string pat = at + ".points[" + std::to_string(i) + "]";
      if (!pt.is_array() || pt.size() != 2) bad_field(file, pat, "must be [bytes, seconds]", pt);
      positive(pt[0], file, pat + "[0]", false, 1e15);
      positive(pt[1], file, pat + "[1]", false, 3600);
    }
  }
  if (comm.contains("colocation")) {
    const auto& co = comm["colocation"];
    if (!co.is_object()) bad_field(file, "comm.colocation", "must be an object", co);
    for (const char* k : {"compute", "memory"}) {
      if (co.contains(k)) positive(co[k], file, std::string("comm.colocation.") + k);
    }
    if (co.contains("stream_bytes")) positive(co["stream_bytes"], file, "comm.colocation.stream_bytes", true);
    if (co.contains("ranks") && !co["ranks"].is_number_integer()) {
      bad_field(file, "comm.colocation.ranks", "must be an integer >= 2", co["ranks"]);
    }
    if (co.contains("seconds")) {
      if (!co["seconds"].is_object()) bad_field(file, "comm.colocation.seconds", "must be an object", co["seconds"]);
      for (const auto& [k, v] : co["seconds"].items()) positive(v, file, "comm.colocation.seconds." + k);
    }
  }
}

fs::path reference_file(const fs::path& rel) {
  std::error_code ec;
  if (rel.empty() || rel.is_absolute() || fs::exists(rel, ec)) return rel;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // build/accel-bench or build-cuda/accel-bench in a clone: the clone's copy.
    for (const auto& root : {exe.parent_path().parent_path(), exe.parent_path()}) {
      if (fs::exists(root / rel, ec)) return root / rel;
    }
  }
  // A build folder outside the tree: the tree it was built from.
  if (const fs::path tree = ACCEL_SOURCE_TREE; fs::exists(tree / rel, ec)) return tree / rel;
  return rel;
}

PeakTable PeakTable::load(const fs::path& published, const fs::path& calibration) {
  PeakTable t;
  t.published_ = load_if(published);
  t.calibration_ = load_if(calibration);
  if (!t.calibration_.is_null()) validate_calibration(t.calibration_, calibration.string());
  // Names that reach terminals and reports: no control character (an escape
  // sequence in a path would reach the run's terminal in a warning).
  t.published_file_ = clean_text(published.string(), 1024);
  t.calibration_file_ = clean_text(calibration.string(), 1024);
  return t;
}

PeakTable PeakTable::load_named(const fs::path& published, const fs::path& calibration, const std::string& flag) {
  std::error_code ec;
  // Only a file that is certainly not there: another failure (a folder it
  // cannot search) is the reader's to name.
  if (!calibration.empty() && !fs::exists(calibration, ec) && !ec) {
    throw ConfigError(flag + " " + clean_text(calibration.string()) + ": no such file (make it with accel-bench calibrate)");
  }
  return load(published, calibration);
}

std::optional<Peak> PeakTable::published(const std::string& gpu_name,
                                         const std::string& dtype) const {
  if (!published_.is_object() || !published_.contains("gpus")) return std::nullopt;
  for (const auto& g : published_["gpus"]) {
    if (!matches(gpu_name, g.value("match", Json::array()))) continue;
    const auto tflops = num_at(g, "dense_tflops/" + dtype);
    if (!tflops) return std::nullopt;
    Peak p;
    p.flops_per_s = *tflops * 1e12;
    p.source = g.value("name", gpu_name) + " " + dtype + " dense " + gflops_text(p.flops_per_s) +
               ", published (" + g.value("source", "?") + "; " + published_file_ + ")";
    return p;
  }
  return std::nullopt;
}

std::string PeakTable::precision_limit_note(const std::string& precision, int threads) const {
  if (matmul_dtype(precision) != "bf16") return "";
  const auto bf16 = calibrated_cpu("bf16", threads), fp32 = calibrated_cpu("fp32", threads);
  if (!bf16 || !fp32 || !(fp32->flops_per_s > 0)) return "";
  const double ratio = bf16->flops_per_s / fp32->flops_per_s;
  if (ratio >= kBf16PaysRatio) return "";
  char text[400];
  std::snprintf(text, sizeof text,
                "bf16 matmuls measured %.1f GFLOP/s against fp32's %.1f at %d thread%s on this CPU "
                "(accel-bench calibrate, %s): %s, so %s is expected no faster than 32-true here",
                bf16->flops_per_s / 1e9, fp32->flops_per_s / 1e9, std::max(threads, 1), threads > 1 ? "s" : "",
                calibration_file_.c_str(),
                ratio < 1 ? "slower than fp32" : "not enough faster to pay for the casts around them",
                precision.c_str());
  return text;
}

std::optional<Peak> PeakTable::calibrated_cpu(const std::string& dtype, int threads) const {
  // A calibration without "cpu" (calibrate --noise, --comm) has no CPU peaks.
  if (!calibration_.is_object()) return std::nullopt;
  const auto cpu = calibration_.find("cpu");
  if (cpu == calibration_.end() || !cpu->is_object()) return std::nullopt;
  const auto table = cpu->find(dtype);
  if (table == cpu->end() || !table->is_object()) return std::nullopt;
  int best = 0;
  double gflops = 0;
  for (const auto& [key, value] : table->items()) {
    const int n = thread_count_key(key).value_or(0);
    if (n >= 1 && n <= std::max(threads, 1) && n > best && value.is_number()) {
      best = n;
      gflops = value.get<double>();
    }
  }
  if (best == 0) return std::nullopt;
  Peak p;
  p.flops_per_s = gflops * 1e9;
  std::ostringstream src;
  src << "CPU " << dtype << " dense matmul " << gflops_text(p.flops_per_s) << " at " << best
      << " thread" << (best > 1 ? "s" : "") << ", measured by accel-bench calibrate ("
      << calibration_file_ << ", " << calibration_.value("measured_at", "?") << ")";
  p.source = src.str();
  return p;
}

std::optional<Peak> PeakTable::for_run(const train::RunRecord& run) const {
  const auto precision = str_at(run.config, "runtime/precision", "32-true");
  const auto dtype = matmul_dtype(precision);
  // The accelerator the run resolved (its plan's; an older record's by the rows' one rule).
  const auto facts = plan::facts_from_env(run.env);
  const auto* row = plan::find_accelerator(run.accelerator);
  if (row != nullptr && !row->host && facts.devices_of(row->kind) > 0) {
    // float32 matmuls run on TF32 tensor cores when the run allowed it
    // (runtime.matmul_precision high or medium), so that is their peak.
    const auto mm = str_at(run.config, "runtime/matmul_precision", "highest");
    const std::string gpu_dtype = dtype == "fp32" && mm != "highest" ? "tf32" : dtype;
    for (const char* key : {"gpu_name", "gpu_model", "gpu/name"}) {
      const auto name = str_at(run.env, key);
      if (!name.empty()) return published(name, gpu_dtype);
    }
    if (run.env.contains("gpus") && run.env["gpus"].is_array() && !run.env["gpus"].empty()) {
      const auto& g = run.env["gpus"][0];
      return published(g.is_string() ? g.get<std::string>() : str_at(g, "name"), gpu_dtype);
    }
    return std::nullopt;
  }
  const int threads = int_at(run.env, "threads", 1, 1);
  return calibrated_cpu(dtype, threads);
}

std::optional<double> run_mfu(const train::RunRecord& run, const PeakTable& peaks) {
  const auto ips = run.per_device_samples_per_s();
  if (!run.ok() || !ips || !run.flops_per_sample) return std::nullopt;
  // An emulated precision's "peak" is the emulation's own speed, which a run
  // bound by it reaches: a utilisation of no hardware (report.h says so).
  if (run.precision_support == "emulated") return std::nullopt;
  // The analytic count must agree with what the step's matmul-class ops
  // were counted to do (train::RunRecord::counters), where the run counted.
  if (run.counters.is_object()) {
    const auto* r = run.counters.contains("flops_counted_over_analytic")
                        ? &run.counters["flops_counted_over_analytic"]
                        : nullptr;
    if (r == nullptr || !r->is_number() || std::fabs(r->get<double>() - 1.0) > kFlopsAgreement) {
      return std::nullopt;
    }
  }
  const auto peak = peaks.for_run(run);
  if (!peak || peak->flops_per_s <= 0) return std::nullopt;
  const double mfu = *run.flops_per_sample * 3.0 * *ips / peak->flops_per_s;
  if (mfu > 1.0) return std::nullopt;  // above the peak: the peak or the count is wrong
  return mfu;
}

std::filesystem::path default_peaks_file(const std::string& machine_id) {
  return std::filesystem::path("results") / "peaks" / (machine_id + ".json");
}

void update_calibration_file(const std::filesystem::path& out, const std::string& machine_id,
                             const nlohmann::json& blocks) {
  nlohmann::json doc = nlohmann::json::object();
  if (std::filesystem::exists(out)) doc = read_json_file(out);
  if (!doc.is_object()) throw ConfigError(out.string() + ": not a JSON object (a calibration file)");
  if (!doc.contains("machine_id")) doc["machine_id"] = machine_id;
  for (const auto& [key, block] : blocks.items()) doc[key] = block;
  if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
  metrics::write_json_atomic(out, doc);
}

}  // namespace accel::machine
