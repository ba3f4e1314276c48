// Where a rank sits, read from torchrun's, Slurm's or our launcher's
// environment; Slurm's hostlists; free ports.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accel/dist/launcher.h"
#include "support/config_error.h"

using accel::dist::expand_slurm_nodelist;
using accel::dist::launch_env_from_environment;
using accel_test::config_error;
using accel_test::has;

namespace {

// Clears every variable the parser reads, sets the given ones, and puts the
// old values back at scope exit.
class EnvGuard {
 public:
  explicit EnvGuard(const std::map<std::string, std::string>& set = {}) {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [k, v] : set) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() {
    for (const auto& [k, v] : saved_) {
      if (v) {
        ::setenv(k.c_str(), v->c_str(), 1);
      } else {
        ::unsetenv(k.c_str());
      }
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

  static constexpr const char* kNames[] = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "ACCEL_BENCH_LAUNCHED", "SLURM_PROCID", "SLURM_NTASKS",
      "SLURM_NPROCS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES", "SLURM_NODELIST",
      "SLURM_JOB_NODELIST", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_JOB_ID",
      "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "ACCEL_STORE_TOKEN"};

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

const std::map<std::string, std::string> kTorchrun = {
    {"RANK", "5"},           {"WORLD_SIZE", "8"},         {"LOCAL_RANK", "1"},
    {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"},       {"MASTER_ADDR", "10.0.0.7"},
    {"MASTER_PORT", "29500"}};

const std::map<std::string, std::string> kSlurm = {
    {"SLURM_PROCID", "6"},   {"SLURM_NTASKS", "8"},           {"SLURM_LOCALID", "2"},
    {"SLURM_NODEID", "1"},   {"SLURM_NNODES", "2"},           {"SLURM_NTASKS_PER_NODE", "4"},
    {"SLURM_NODELIST", "node[01-04,07],gpu5"}, {"SLURM_JOB_ID", "123456"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> base,
                                        const std::map<std::string, std::string>& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

}  // namespace

TEST_CASE("launch env: no rank in the environment means one process and no source") {
  EnvGuard g;
  const auto e = launch_env_from_environment();
  CHECK_FALSE(e.present());
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 0);
}

TEST_CASE("launch env: torchrun variables give rank, world, local layout, node and master") {
  EnvGuard g(kTorchrun);
  const auto e = launch_env_from_environment();
  CHECK(e.source == "torchrun");
  CHECK(e.present());
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.node_rank == 1);
  CHECK(e.num_nodes == 2);
  CHECK(e.master_addr == "10.0.0.7");
  CHECK(e.master_port == 29500);
}

TEST_CASE("launch env: with only RANK and WORLD_SIZE the job is one node on loopback") {
  EnvGuard g({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  const auto e = launch_env_from_environment();
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.node_rank == 0);
  CHECK(e.num_nodes == 1);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 0);
}

TEST_CASE("launch env: ACCEL_BENCH_LAUNCHED marks the children of our launcher") {
  EnvGuard g(with(kTorchrun, {{"ACCEL_BENCH_LAUNCHED", "1"}}));
  CHECK(launch_env_from_environment().source == "accel-bench");
}

TEST_CASE("launch env: Slurm variables, master from the first host of the expanded nodelist") {
  EnvGuard g(kSlurm);
  const auto e = launch_env_from_environment();
  CHECK(e.source == "slurm");
  CHECK(e.rank == 6);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 4);
  CHECK(e.node_rank == 1);
  CHECK(e.num_nodes == 2);
  CHECK(e.master_addr == "node01");
  // Derived from the job id, the same in every task.
  CHECK(e.master_port == 15000 + 123456 % 10000);
}

TEST_CASE("launch env: Slurm's SLURM_TASKS_PER_NODE form and an explicit master") {
  auto vars = kSlurm;
  vars.erase("SLURM_NTASKS_PER_NODE");
  vars["SLURM_TASKS_PER_NODE"] = "4(x2)";
  vars["MASTER_ADDR"] = "head";
  vars["MASTER_PORT"] = "6000";
  EnvGuard g(vars);
  const auto e = launch_env_from_environment();
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "head");
  CHECK(e.master_port == 6000);
}

TEST_CASE("launch env: torchrun variables win over Slurm's (torchrun inside an allocation)") {
  EnvGuard g(with(kSlurm, kTorchrun));
  const auto e = launch_env_from_environment();
  CHECK(e.source == "torchrun");
  CHECK(e.rank == 5);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "10.0.0.7");
}

TEST_CASE("launch env: malformed or inconsistent values are config errors naming the variable") {
  auto error_with = [](const std::map<std::string, std::string>& vars) {
    EnvGuard g(vars);
    return config_error([] { launch_env_from_environment(); });
  };
  CHECK(has(error_with(with(kTorchrun, {{"RANK", "x"}})), "RANK=x"));
  CHECK(has(error_with(with(kTorchrun, {{"RANK", "-1"}})), "RANK=-1"));
  CHECK(has(error_with(with(kTorchrun, {{"RANK", "8"}})), "WORLD_SIZE=8"));
  CHECK(has(error_with(with(kTorchrun, {{"WORLD_SIZE", "0"}})), "WORLD_SIZE=0"));
  CHECK(has(error_with(with(kTorchrun, {{"LOCAL_RANK", "4"}})), "LOCAL_RANK=4"));
  CHECK(has(error_with(with(kTorchrun, {{"LOCAL_WORLD_SIZE", "16"}})), "LOCAL_WORLD_SIZE=16"));
  CHECK(has(error_with(with(kTorchrun, {{"GROUP_RANK", "2"}})), "GROUP_RANK=2"));
  CHECK(has(error_with(with(kTorchrun, {{"MASTER_PORT", "70000"}})), "MASTER_PORT=70000"));
  CHECK(has(error_with(with(kTorchrun, {{"MASTER_PORT", "29500 "}})), "MASTER_PORT"));
  CHECK(has(error_with({{"RANK", "0"}}), "WORLD_SIZE"));
  CHECK(has(error_with(with(kSlurm, {{"SLURM_PROCID", "8"}})), "SLURM_PROCID=8"));
  CHECK(has(error_with(with(kSlurm, {{"SLURM_LOCALID", "zero"}})), "SLURM_LOCALID=zero"));
  CHECK(has(error_with(with(kSlurm, {{"SLURM_NODELIST", "node[01-"}})), "SLURM_NODELIST"));
  CHECK(has(error_with(with(kSlurm, {{"SLURM_NODELIST", "node[3-1]"}})), "SLURM_NODELIST"));
}

TEST_CASE("slurm nodelist: ranges, lists, zero padding and several bracket groups expand in order") {
  using V = std::vector<std::string>;
  CHECK(expand_slurm_nodelist("node[01-04,07],gpu5") ==
        V{"node01", "node02", "node03", "node04", "node07", "gpu5"});
  CHECK(expand_slurm_nodelist("a") == V{"a"});
  CHECK(expand_slurm_nodelist("n[8-11]") == V{"n8", "n9", "n10", "n11"});
  CHECK(expand_slurm_nodelist("r[1-2]-n[09-10]") == V{"r1-n09", "r1-n10", "r2-n09", "r2-n10"});
  CHECK(expand_slurm_nodelist("x[3],y[1,5]z") == V{"x3", "y1z", "y5z"});
  CHECK(expand_slurm_nodelist("").empty());
  CHECK(has(config_error([] { expand_slurm_nodelist("a,,b"); }), "SLURM_NODELIST"));
  CHECK(has(config_error([] { expand_slurm_nodelist("a]"); }), "SLURM_NODELIST"));
  CHECK(has(config_error([] { expand_slurm_nodelist("a[x-2]"); }), "SLURM_NODELIST"));
}

TEST_CASE("free_tcp_port returns a port that can be bound on that address") {
  const int port = accel::dist::free_tcp_port("127.0.0.1");
  REQUIRE(port > 0);
  REQUIRE(port <= 65535);
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  CHECK(::listen(s, 1) == 0);
  ::close(s);
}

TEST_CASE("free_tcp_port: an address that is not this machine's is a config error") {
  CHECK(has(config_error([] { accel::dist::free_tcp_port("192.0.2.1"); }), "192.0.2.1"));
  CHECK(has(config_error([] { accel::dist::free_tcp_port("no such host.invalid"); }),
            "no such host.invalid"));
}

TEST_CASE("local_address_towards: loopback is reached from loopback") {
  CHECK(accel::dist::local_address_towards("127.0.0.1") == "127.0.0.1");
}

TEST_CASE("launch env: torchrun's agent store and its attempt are read, and a short ACCEL_STORE_TOKEN is refused") {
  auto vars = kTorchrun;
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  vars["TORCHELASTIC_RESTART_COUNT"] = "2";
  {
    EnvGuard g(vars);
    const auto e = launch_env_from_environment();
    CHECK(e.agent_store);
    CHECK(e.agent_attempt == 2);
    CHECK(e.store_token.empty());
  }
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  vars["ACCEL_STORE_TOKEN"] = "0123456789abcdef";
  {
    EnvGuard g(vars);
    const auto e = launch_env_from_environment();
    CHECK_FALSE(e.agent_store);
    CHECK(e.store_token == "0123456789abcdef");
  }
  vars["ACCEL_STORE_TOKEN"] = "short";
  EnvGuard g(vars);
  const auto msg = config_error([] { launch_env_from_environment(); });
  CHECK(has(msg, "ACCEL_STORE_TOKEN"));
  CHECK(has(msg, "at least 16"));
}
