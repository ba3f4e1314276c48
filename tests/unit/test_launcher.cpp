// The local launcher, with /bin/sh ranks: exit codes, signals, stopping the
// others, forwarding the launcher's signals, and nothing left running. Waits
// are bounded; nothing here checks how long anything took.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "accel/dist/launcher.h"
#include "accel/util/errors.h"
#include "support/config_error.h"
#include "support/temp_dir.h"

using accel::dist::launch_local;
using accel::dist::LaunchOptions;
using accel::dist::LaunchOutcome;
using accel_test::has;
using accel_test::TempDir;

namespace {

bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool nonempty(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::file_size(p, ec) > 0 && !ec;
}

int read_pid(const std::filesystem::path& p) { return std::stoi(slurp(p)); }

// Running and not a zombie (an orphan's zombie may wait for a busy init).
bool alive(int pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

LaunchOptions shell_ranks(int n, const std::string& script) {
  LaunchOptions o;
  o.nprocs = n;
  o.argv = {"/bin/sh", "-c", script};
  o.grace = std::chrono::seconds(10);
  return o;
}

// Writes $$ to D/pid.$RANK atomically (others poll for it).
std::string announce(const TempDir& d) {
  const std::string f = (d / "pid.").string() + "$RANK";
  return "echo $$ > " + f + ".tmp && mv " + f + ".tmp " + f + "\n";
}

// A bounded wait in shell: until `cond` holds, at most ~30 s.
std::string shell_wait(const std::string& cond) {
  return "i=0; while ! " + cond + " && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n";
}

// A rank that idles for at most 60 s, then fails (so a missed signal shows).
const std::string kIdle = "i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 9\n";

// Sends `signo` to this process from a thread once both ranks announced
// themselves, then runs `after` (which may send more).
std::thread signal_when_up(const TempDir& d, int signo, std::function<void()> after = {}) {
  const auto p0 = d / "pid.0", p1 = d / "pid.1";
  return std::thread([p0, p1, signo, after] {
    if (!wait_until([&] { return nonempty(p0) && nonempty(p1); })) return;
    ::kill(::getpid(), signo);
    if (after) after();
  });
}

}  // namespace

TEST_CASE("launch_local: every rank exiting 0 gives exit code 0 and a picked port") {
  TempDir d;
  auto o = shell_ranks(3, "echo $MASTER_PORT > " + (d / "port.").string() + "$RANK");
  const LaunchOutcome out = launch_local(o);
  CHECK(out.exit_code == 0);
  CHECK(out.first_failed_rank == -1);
  CHECK(out.interrupted_by == 0);
  CHECK(has(out.message, "all 3 ranks exited 0"));
  REQUIRE(out.master_port > 0);
  for (int r = 0; r < 3; ++r) CHECK(slurp(d / ("port." + std::to_string(r))) == std::to_string(out.master_port) + "\n");
}

TEST_CASE("launch_local: each rank sees its rank, world, node and master in its environment") {
  TempDir d;
  ::setenv("RANK", "99", 1);  // the launcher's own values must be replaced, not doubled
  auto o = shell_ranks(2, "env | grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|"
                          "GROUP_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|ACCEL_BENCH_LAUNCHED)=' | sort > " +
                              (d / "env.").string() + "$LOCAL_RANK");
  o.node_rank = 1;
  o.num_nodes = 2;
  o.master_addr = "10.1.2.3";
  o.master_port = 29555;
  const auto out = launch_local(o);
  ::unsetenv("RANK");
  CHECK(out.exit_code == 0);
  for (int lr = 0; lr < 2; ++lr) {
    const std::string expected =
        "ACCEL_BENCH_LAUNCHED=1\nGROUP_RANK=1\nGROUP_WORLD_SIZE=2\nLOCAL_RANK=" + std::to_string(lr) +
        "\nLOCAL_WORLD_SIZE=2\nMASTER_ADDR=10.1.2.3\nMASTER_PORT=29555\nRANK=" + std::to_string(2 + lr) +
        "\nWORLD_SIZE=4\n";
    CHECK(slurp(d / ("env." + std::to_string(lr))) == expected);
  }
}

TEST_CASE("launch_local: a rank exiting 3 stops the others, its code is the outcome, nothing is left") {
  TempDir d;
  const std::string gc = (d / "grandchild").string();
  // Rank 0 starts a process of its own (it must stop too), then announces itself
  // and waits; rank 1 fails once rank 0 is up.
  auto o = shell_ranks(2, "if [ \"$RANK\" = 1 ]; then\n" + shell_wait("[ -s " + (d / "pid.0").string() + " ]") +
                              "exit 3\nfi\nsleep 60 & echo $! > " + gc + "\n" + announce(d) + "wait\n");
  const auto out = launch_local(o);
  CHECK(out.exit_code == 3);
  CHECK(out.first_failed_rank == 1);
  CHECK(has(out.message, "rank 1 (pid "));
  CHECK(has(out.message, "exited with code 3"));
  CHECK(has(out.message, "stopped 1 other rank"));
  REQUIRE(nonempty(d / "pid.0"));
  CHECK_FALSE(alive(read_pid(d / "pid.0")));
  REQUIRE(nonempty(gc));
  const int grandchild = read_pid(gc);
  CHECK(wait_until([&] { return !alive(grandchild); }, std::chrono::seconds(10)));
}

TEST_CASE("launch_local: a rank killed by SIGKILL gives 128+9 and the message names the signal") {
  TempDir d;
  auto o = shell_ranks(2, "if [ \"$RANK\" = 1 ]; then\n" + shell_wait("[ -s " + (d / "pid.0").string() + " ]") +
                              "kill -9 $$\nfi\n" + announce(d) + kIdle);
  const auto out = launch_local(o);
  CHECK(out.exit_code == 128 + 9);
  CHECK(out.first_failed_rank == 1);
  CHECK(has(out.message, "rank 1 (pid "));
  CHECK(has(out.message, "killed by signal 9 (SIGKILL)"));
  REQUIRE(nonempty(d / "pid.0"));
  CHECK_FALSE(alive(read_pid(d / "pid.0")));
}

TEST_CASE("launch_local: a rank that ignores SIGTERM is killed once the grace period is over") {
  TempDir d;
  auto o = shell_ranks(2, "if [ \"$RANK\" = 1 ]; then\n" + shell_wait("[ -s " + (d / "pid.0").string() + " ]") +
                              "exit 2\nfi\ntrap '' TERM\n" + announce(d) + kIdle);
  o.grace = std::chrono::milliseconds(300);
  const auto out = launch_local(o);
  CHECK(out.exit_code == 2);
  CHECK(out.first_failed_rank == 1);
  REQUIRE(nonempty(d / "pid.0"));
  CHECK_FALSE(alive(read_pid(d / "pid.0")));
}

TEST_CASE("launch_local: SIGTERM to the launcher reaches every rank, which stop cleanly") {
  TempDir d;
  auto o = shell_ranks(2, "trap 'echo term > " + (d / "term.").string() + "$RANK; exit 0' TERM\n" + announce(d) + kIdle);
  auto sender = signal_when_up(d, SIGTERM);
  const auto out = launch_local(o);
  sender.join();
  CHECK(out.interrupted_by == SIGTERM);
  CHECK(out.exit_code == 0);  // both ranks handled it and exited 0
  CHECK(has(out.message, "interrupted by SIGTERM, forwarded to 2 ranks"));
  CHECK(slurp(d / "term.0") == "term\n");
  CHECK(slurp(d / "term.1") == "term\n");
}

TEST_CASE("launch_local: a second SIGINT kills ranks that carry on after the first") {
  TempDir d;
  const auto int0 = d / "int.0", int1 = d / "int.1";
  auto o = shell_ranks(2, "trap 'echo int >> " + (d / "int.").string() + "$RANK' INT\n" + announce(d) + kIdle);
  o.grace = std::chrono::seconds(120);  // only the second signal can end this in time
  auto sender = signal_when_up(d, SIGINT, [int0, int1] {
    if (wait_until([&] { return nonempty(int0) && nonempty(int1); })) ::kill(::getpid(), SIGINT);
  });
  const auto out = launch_local(o);
  sender.join();
  CHECK(out.interrupted_by == SIGINT);
  CHECK(out.exit_code == 128 + 9);
  CHECK(has(out.message, "killed them on a second signal"));
  CHECK(slurp(int0) == "int\n");
  CHECK_FALSE(alive(read_pid(d / "pid.0")));
  CHECK_FALSE(alive(read_pid(d / "pid.1")));
}

TEST_CASE("launch_local: SIGUSR1 to the launcher is forwarded and does not stop the job") {
  TempDir d;
  auto o = shell_ranks(2, "trap 'echo usr1 > " + (d / "usr1.").string() + "$RANK; exit 0' USR1\n" + announce(d) + kIdle);
  auto sender = signal_when_up(d, SIGUSR1);
  const auto out = launch_local(o);
  sender.join();
  CHECK(out.interrupted_by == 0);
  CHECK(out.exit_code == 0);
  CHECK(slurp(d / "usr1.0") == "usr1\n");
  CHECK(slurp(d / "usr1.1") == "usr1\n");
}

TEST_CASE("launch_local: the launcher's signal handlers are put back afterwards") {
  struct sigaction before {}, after {};
  sigaction(SIGTERM, nullptr, &before);
  launch_local(shell_ranks(1, "exit 0"));
  sigaction(SIGTERM, nullptr, &after);
  CHECK((before.sa_handler == after.sa_handler));
}

TEST_CASE("launch_local: a program that cannot be run is an error, and no rank is left") {
  LaunchOptions o;
  o.nprocs = 2;
  o.argv = {"/nonexistent/accel-bench"};
  CHECK_THROWS_AS(launch_local(o), accel::RunError);
  o.argv = {"no-such-program-accel-bench"};
  CHECK_THROWS_AS(launch_local(o), accel::RunError);
}

TEST_CASE("launch_local: bad options are config errors") {
  using accel_test::config_error;
  CHECK(has(config_error([] { launch_local(shell_ranks(0, "true")); }), "nprocs"));
  CHECK(has(config_error([] {
              auto o = shell_ranks(1, "true");
              o.num_nodes = 2;
              launch_local(o);
            }),
            "master port"));
  CHECK(has(config_error([] {
              auto o = shell_ranks(1, "true");
              o.node_rank = 1;
              launch_local(o);
            }),
            "node_rank"));
}
