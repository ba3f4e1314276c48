#include "accel/ladder/child_run.h"

#include <chrono>

#include "accel/config/run_config.h"
#include "accel/util/errors.h"

namespace accel::ladder {

namespace fs = std::filesystem;

Earlier earlier_run(const fs::path& dir, const Json& resolved, bool resume, bool need_checkpoint,
                    train::RunRecord* prior_out) {
  if (!resume) return Earlier::None;
  const auto prior = train::read_run_record(dir);
  if (prior_out != nullptr) *prior_out = prior;
  if (!prior.present) return Earlier::None;
  // The recorded config resolved again by today's schema: a run made before
  // a field was added (which takes its default) is the same config; one
  // today's schema refuses is compared as recorded.
  Json prior_today = prior.config;
  try {
    prior_today = config::resolve_config(prior.config, dir);
  } catch (const ConfigError&) {
  }
  if (config::config_hash(prior_today) != config::config_hash(resolved)) return Earlier::None;
  const bool checkpoint = fs::exists(dir / "checkpoint.ckpt");
  if (prior.ok() && (!need_checkpoint || checkpoint)) return Earlier::Reuse;
  // A run a signal stopped continues from its checkpoint.
  if (prior.status == "interrupted" && checkpoint) return Earlier::Continue;
  return Earlier::None;
}

ChildRunResult run_child_run(const ChildRun& r) {
  fs::create_directories(r.dir);
  fs::remove(r.dir / "result.json");  // a crash must not leave an older result in place
  std::vector<std::string> argv = {r.exe.string(), "run", "-c", r.config.string(), "--out", r.dir.string()};
  if (r.continue_run) {
    argv.insert(argv.end(), {"--resume", "auto"});
  } else {
    argv.push_back("--force");
  }
  argv.insert(argv.end(), r.args.begin(), r.args.end());
  for (const auto& s : r.sets) argv.insert(argv.end(), {"--set", s});
  ChildRunResult out;
  const auto t0 = std::chrono::steady_clock::now();
  out.child = util::run_child(argv, r.dir / "run.log", [](const std::string&) {}, {}, r.on_event, r.timeout_s);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.record = train::read_run_record(r.dir);
  if (out.child.stop_signal != 0) {
    out.status = "interrupted";
  } else if (out.child.exit_code == 0 && out.record.ok()) {
    out.status = "ok";
  } else {
    out.status = "failed";
    out.error = !out.record.error.empty() && !out.child.timed_out ? out.record.error : out.child.last_line;
  }
  return out;
}

}  // namespace accel::ladder
