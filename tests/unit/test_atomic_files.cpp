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
#include <iterator>
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

TEST_CASE("dir lock: a .lock that is a link, a hard link or not a regular file is refused and its target left as it is") {
  accel_test::TempDir tmp;
  const auto victim = tmp.write("victim.txt", "keep me\n");
  auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto refused = [&](const std::filesystem::path& out, const std::string& why) {
    try {
      accel::metrics::DirLock lock(out);
      FAIL("the lock was taken");
    } catch (const accel::ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find((out / ".lock").string()) != std::string::npos);
      CHECK(what.find(why) != std::string::npos);
    }
  };
  // A symbolic link, to a file (truncated and overwritten with a pid before)
  // and dangling (created before).
  std::filesystem::create_directories(tmp / "out1");
  std::filesystem::create_symlink(victim, tmp / "out1" / ".lock");
  refused(tmp / "out1", "is a symbolic link");
  CHECK(read(victim) == "keep me\n");
  std::filesystem::create_directories(tmp / "out2");
  std::filesystem::create_symlink(tmp / "made-through-the-link", tmp / "out2" / ".lock");
  refused(tmp / "out2", "is a symbolic link");
  CHECK_FALSE(std::filesystem::exists(tmp / "made-through-the-link"));
  // A hard link: the same file under another name elsewhere.
  std::filesystem::create_directories(tmp / "out3");
  std::filesystem::create_hard_link(victim, tmp / "out3" / ".lock");
  refused(tmp / "out3", "has other hard links");
  CHECK(read(victim) == "keep me\n");
  // A FIFO (an open() that would wait) and a folder.
  std::filesystem::create_directories(tmp / "out4");
  REQUIRE(::mkfifo((tmp / "out4" / ".lock").c_str(), 0644) == 0);
  refused(tmp / "out4", "is not a regular file");
  std::filesystem::create_directories(tmp / "out5" / ".lock");
  CHECK_THROWS_AS(accel::metrics::DirLock(tmp / "out5"), accel::ConfigError);
  // A lock file of our own, left by an earlier run: taken, its pid replaced.
  tmp.write("out6/.lock", "999999999\n");
  {
    accel::metrics::DirLock lock(tmp / "out6");
    CHECK(lock.held());
    CHECK(read(tmp / "out6" / ".lock") == std::to_string(::getpid()) + "\n");
  }
}
