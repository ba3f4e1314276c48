// One atomic-write helper for every output, and the clean-up of temp files
// that killed runs leave behind.
#include <doctest/doctest.h>

#include "support/temp_dir.h"
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "accel/metrics/metrics.h"
#include "accel/util/errors.h"

namespace {

namespace fs = std::filesystem;
using namespace accel::metrics;
using accel_test::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pid of a child that has already exited (and been reaped): a pid that
// no live process holds, as after a kill -9.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("atomic files: write_bytes_atomic writes the pieces and leaves no temp file") {
  TempDir dir;
  const auto file = dir / "result.json";
  CHECK(write_bytes_atomic(file, {"head|", "", "payload|", "tail"}));
  CHECK(slurp(file) == "head|payload|tail");
  write_file_atomic(file, "second");
  CHECK(slurp(file) == "second");
  write_json_atomic(dir / "x.json", nlohmann::json{{"a", 1}});
  CHECK(nlohmann::json::parse(slurp(dir / "x.json"))["a"] == 1);
  auto names = dir.entries();
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"result.json", "x.json"});
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == (0644 & ~[] { mode_t m = ::umask(0); ::umask(m); return m; }()));
}

TEST_CASE("atomic files: IfExists::Keep never replaces an existing file") {
  TempDir dir;
  const auto file = dir / "step-1.ckpt";
  CHECK(write_bytes_atomic(file, {"first"}, IfExists::Keep));
  CHECK_FALSE(write_bytes_atomic(file, {"second"}, IfExists::Keep));
  CHECK(slurp(file) == "first");
  CHECK(dir.entries().size() == 1);
}

TEST_CASE("atomic files: a failed write names the path and leaves nothing behind") {
  TempDir dir;
  const auto file = dir / "no-such-dir" / "result.json";
  try {
    write_file_atomic(file, "x");
    FAIL("expected RunError");
  } catch (const accel::RunError& e) {
    CHECK(std::string(e.what()).find(file.string() + ": cannot create") == 0);
  }
  // The target is a folder: the rename fails and the temp file is removed.
  fs::create_directories(dir / "taken" / "inner");
  CHECK_THROWS_AS(write_file_atomic(dir / "taken", "x"), accel::RunError);
  auto names = dir.entries();
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"taken"});
}

TEST_CASE("atomic files: remove_stale_temp_files removes dead writers' files only") {
  TempDir dir;
  const std::string dead = std::to_string(dead_pid());
  const std::string live = std::to_string(::getppid());  // our parent outlives this test
  const std::string self = std::to_string(::getpid());
  fs::create_directories(dir / "checkpoints");
  const std::vector<std::string> gone = {
      "result.json.tmp." + dead + ".0badcafe", "metrics.csv.tmp." + dead,  // older naming
      "checkpoints/.step-12.ckpt.tmp." + dead + ".3"};                     // checkpoint writer's
  const std::vector<std::string> kept = {
      "config.json.tmp." + live + ".deadbeef", "result.json.tmp." + self + ".00000001",
      "result.json", "notes.tmp.txt", "a.tmp." + dead + ".not-hex!", ".tmp." + dead,
      "x.tmp.12ab", "checkpoints/step-12.ckpt"};
  for (const auto& n : gone) std::ofstream(dir / n) << "x";
  for (const auto& n : kept) std::ofstream(dir / n) << "x";
  const auto removed = remove_stale_temp_files(dir.path);
  CHECK(removed.size() == gone.size());
  for (const auto& n : gone) CHECK_MESSAGE(!fs::exists(dir / n), n);
  for (const auto& n : kept) CHECK_MESSAGE(fs::exists(dir / n), n);
  // A folder that does not exist yet has nothing stale.
  CHECK(remove_stale_temp_files(dir / "missing").empty());
}
