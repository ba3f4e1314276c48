#include "accel/train/launch_run.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "accel/dist/launcher.h"
#include "accel/train/checks.h"
#include "accel/train/device.h"
#include "accel/train/result.h"
#include "accel/util/errors.h"

namespace accel::train {

namespace fs = std::filesystem;

metrics::DirLock lock_out_dir(const RunOptions& opts, std::ostream* log) {
  const auto env = dist::launch_env_from_environment();
  if (env.source == "accel-bench" || (env.present() && env.rank != 0)) return {};
  check_out_dir(opts);  // a folder that can be made, before making it
  metrics::DirLock lock(opts.out_dir);
  try {
    check_out_dir(opts);  // again, now that no other run can write
    if (opts.overwrite && opts.resume.empty()) {
      const auto removed = clear_replaced_run(opts.out_dir);
      if (!removed.empty() && log != nullptr) {
        std::string list;
        for (const auto& r : removed) list += (list.empty() ? "" : ", ") + r;
        *log << "== --force: removed the replaced run's " << list << "\n";
      }
    }
  } catch (...) {
    lock.release_and_tidy();
    throw;
  }
  return lock;
}

LaunchedJob launch_ranks(const config::RunConfig& cfg, const std::vector<std::string>& argv, std::ostream* log) {
  const auto& rt = cfg.runtime;
  if (rt.num_nodes > 1) {
    throw ConfigError(
        "runtime.num_nodes: " + std::to_string(rt.num_nodes) +
        " nodes need one launcher per node that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT "
        "(torchrun --nnodes N --nproc-per-node " + std::to_string(rt.devices) +
        " accel-bench run ..., or srun); this process found none");
  }
  dist::LaunchOptions o;
  o.nprocs = rt.devices;
  o.argv = argv;
  o.argv[0] = "/proc/self/exe";
  // As config --explain says: the config's value, else MASTER_ADDR/MASTER_PORT
  // from the environment, else loopback and a free port. (One node's ranks
  // meet in a private FileStore; the address still picks Gloo's interface.)
  const char* env_addr = std::getenv("MASTER_ADDR");
  const char* env_port = std::getenv("MASTER_PORT");
  if (!rt.master_addr.empty()) {
    o.master_addr = rt.master_addr;
  } else if (env_addr != nullptr && *env_addr != '\0') {
    o.master_addr = env_addr;
  }
  o.master_port = rt.master_port;
  if (o.master_port == 0 && env_port != nullptr && *env_port != '\0') {
    char* end = nullptr;
    const long port = std::strtol(env_port, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535) {
      throw ConfigError(std::string("MASTER_PORT: \"") + env_port + "\" is not a TCP port (1-65535)");
    }
    o.master_port = int(port);
  }
  o.grace = std::chrono::seconds(std::min(rt.timeout_s, 30));
  o.log = log;
  const auto outcome = dist::launch_local(o);
  LaunchedJob job;
  if (outcome.exit_code == 0) return job;
  if (log != nullptr) *log << "accel-bench: " << outcome.message << "\n";
  job.failure = outcome.message;
  // A rank's own code (2 input error, 3 interrupted, 1 failed); a signal -> 1.
  job.exit_code = outcome.exit_code <= 3 ? outcome.exit_code : 1;
  return job;
}

void record_launch_failure(const fs::path& out, const nlohmann::json& resolved, const std::string& failure,
                           fs::file_time_type started, std::ostream* log) {
  std::error_code ec;
  const auto config = out / "config.json", result = out / "result.json";
  if (!fs::exists(config, ec) || fs::last_write_time(config, ec) < started) return;
  if (fs::exists(result, ec) && fs::last_write_time(result, ec) >= started) return;
  try {
    RunResult r;  // result.json's own schema, as a run writes it
    r.name = resolved.value("name", "");
    r.status = "failed";
    r.error = failure;
    if (names_out_of_memory(failure)) r.failure = "out_of_memory";  // a rank's, as the launcher tells it
    r.config = resolved;
    r.env = metrics::environment(0);
    r.finished_at = metrics::utc_now();
    auto doc = to_json(r);
    doc["written_by"] = "launcher (rank 0 wrote no result)";
    metrics::write_json_atomic(result, doc);
  } catch (const std::exception& e) {
    if (log != nullptr) *log << "accel-bench: cannot record the failure in " << result.string() << ": " << e.what() << "\n";
  }
}

}  // namespace accel::train
