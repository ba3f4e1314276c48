// The one rule the sweep and tune apply to a run folder under --resume.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "accel/config/run_config.h"
#include "accel/ladder/child_run.h"
#include "support/temp_dir.h"

using accel::Json;
using accel::ladder::Earlier;
using accel::ladder::earlier_run;

namespace {

// DIR/result.json of a run of `resolved` that ended with `status`.
void write_result(const std::filesystem::path& dir, const Json& resolved, const std::string& status) {
  std::filesystem::create_directories(dir);
  Json doc = {{"status", status}, {"config", resolved}, {"name", "r"}};
  std::ofstream(dir / "result.json") << doc.dump();
}

}  // namespace

TEST_CASE("child runs: an ok run of the same config is reused, an interrupted one with its checkpoint continues, anything else runs afresh") {
  accel_test::TempDir tmp;
  const Json resolved = accel::config::resolve_config(Json::object(), ".");
  const Json other = accel::config::resolve_config(Json{{"train", {{"epochs", 3}}}}, ".");
  const auto dir = tmp / "run";
  CHECK(earlier_run(dir, resolved, true) == Earlier::None);  // nothing there
  write_result(dir, resolved, "ok");
  CHECK(earlier_run(dir, resolved, true) == Earlier::Reuse);
  CHECK(earlier_run(dir, resolved, false) == Earlier::None);  // without --resume: always afresh
  CHECK(earlier_run(dir, other, true) == Earlier::None);      // another resolved config
  // An upstream run others start from is reused only with its checkpoint.
  CHECK(earlier_run(dir, resolved, true, /*need_checkpoint=*/true) == Earlier::None);
  std::ofstream(dir / "checkpoint.ckpt") << "x";
  CHECK(earlier_run(dir, resolved, true, true) == Earlier::Reuse);
  // Stopped by a signal: continued from its checkpoint, never reused.
  write_result(dir, resolved, "interrupted");
  CHECK(earlier_run(dir, resolved, true) == Earlier::Continue);
  CHECK(earlier_run(dir, other, true) == Earlier::None);
  std::filesystem::remove(dir / "checkpoint.ckpt");
  CHECK(earlier_run(dir, resolved, true) == Earlier::None);
  write_result(dir, resolved, "failed");
  std::ofstream(dir / "checkpoint.ckpt") << "x";
  CHECK(earlier_run(dir, resolved, true) == Earlier::None);
}

TEST_CASE("child runs: a run recorded before a field was added is reused as the same config under --resume") {
  accel_test::TempDir tmp;
  const Json resolved = accel::config::resolve_config(Json::object(), ".");
  Json recorded = resolved;
  recorded["train"].erase("task");  // as a run made before train.task existed records it
  const auto dir = tmp / "run";
  write_result(dir, recorded, "ok");
  CHECK(earlier_run(dir, resolved, true) == Earlier::Reuse);
  recorded["train"]["epochs"] = 7;  // a value that differs still differs
  write_result(dir, recorded, "ok");
  CHECK(earlier_run(dir, resolved, true) == Earlier::None);
}
