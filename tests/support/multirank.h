// Multi-rank unit tests over Gloo: a test case runs itself as N child
// processes of this test binary (fork + exec, so every rank starts fresh,
// with no OpenMP or Gloo state inherited), each a rank of one process group.
//
//   TEST_CASE("ddp: ...") {
//     if (auto rank = accel::test::as_rank()) {   // inside a rank
//       ... rank->comm, rank->rank, rank->dir (a folder shared by the ranks) ...
//       return;
//     }
//     accel::test::spawn_ranks("ddp: ...", 2, dir.path());  // the driver
//     ... read what the ranks wrote into dir ...
//   }
// A failing check inside a rank makes that rank exit non-zero, which fails
// the driver's check, and so does a rank that never entered the test case.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "accel/dist/comm.h"

namespace accel::test {

struct RankEnv {
  int rank = 0, world = 1;
  std::string dir;
  std::shared_ptr<dist::Comm> comm;
};

// The rank this process is, with its process group connected; nullopt in
// the driver.
inline std::optional<RankEnv> as_rank() {
  const char* r = std::getenv("ACCEL_TEST_RANK");
  if (r == nullptr) return std::nullopt;
  RankEnv env;
  env.rank = std::atoi(r);
  env.world = std::atoi(std::getenv("ACCEL_TEST_WORLD"));
  env.dir = std::getenv("ACCEL_TEST_DIR");
  // Tells the driver this rank entered the test (a filter that matched
  // nothing would otherwise exit 0 with no test run).
  std::fclose(std::fopen((env.dir + "/.rank-" + std::to_string(env.rank) + "-ran").c_str(), "w"));
  dist::CommOptions o;
  o.rank = env.rank;
  o.world_size = env.world;
  o.master_port = std::atoi(std::getenv("ACCEL_TEST_PORT"));
  o.timeout = std::chrono::seconds(60);
  env.comm = dist::connect(o);
  return env;
}

// A port that was free a moment ago (the rank-0 store binds it right after).
inline int free_port_for_test() {
  static int next = 0;
  if (next == 0) next = 20000 + int(::getpid() % 20000);
  return next++;
}

// Runs test case `name` in `world` ranks and checks they all exit 0 within
// `timeout`; ranks still running then are killed.
inline void spawn_ranks(const std::string& name, int world, const std::string& dir,
                        std::chrono::seconds timeout = std::chrono::seconds(240)) {
  const int port = free_port_for_test();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::setenv("ACCEL_TEST_RANK", std::to_string(r).c_str(), 1);
      ::setenv("ACCEL_TEST_WORLD", std::to_string(world).c_str(), 1);
      ::setenv("ACCEL_TEST_PORT", std::to_string(port).c_str(), 1);
      ::setenv("ACCEL_TEST_DIR", dir.c_str(), 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      std::string filter = "--test-case=";
      for (char c : name) {  // ',' separates doctest's filters: escaped, it is the name's own
        if (c == ',') filter += '\\';
        filter += c;
      }
      ::execl("/proc/self/exe", "accel_tests", filter.c_str(), "--no-version=true", nullptr);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> status(size_t(world), -1);
  int left = world;
  while (left > 0) {
    for (int r = 0; r < world; ++r) {
      if (status[size_t(r)] != -1) continue;
      int st = 0;
      if (::waitpid(pids[size_t(r)], &st, WNOHANG) == pids[size_t(r)]) {
        status[size_t(r)] = st;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r) {
        if (status[size_t(r)] == -1) ::kill(pids[size_t(r)], SIGKILL);
      }
      for (int r = 0; r < world; ++r) {
        if (status[size_t(r)] == -1) ::waitpid(pids[size_t(r)], &status[size_t(r)], 0);
      }
      FAIL("ranks of \"" << name << "\" still running after " << timeout.count() << " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < world; ++r) {
    const int st = status[size_t(r)];
    INFO("rank " << r << " of \"" << name << "\"");
    CHECK(WIFEXITED(st));
    if (WIFEXITED(st)) CHECK(WEXITSTATUS(st) == 0);
    const std::string ran = dir + "/.rank-" + std::to_string(r) + "-ran";
    CHECK_MESSAGE(::access(ran.c_str(), F_OK) == 0, "rank " << r << " did not run the test case");
  }
}

}  // namespace accel::test
