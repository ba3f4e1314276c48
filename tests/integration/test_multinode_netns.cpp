// Two "nodes" on one machine: two network namespaces joined by a veth pair,
// one rank of the real CLI in each with torchrun's variables, and the result
// must equal the same job run as 2 local ranks by `accel-bench run` itself.
// Needs root and iproute2; where namespaces cannot be made it says so and
// skips. Addresses are a private /30 that exists only inside the namespaces.
#include <torch/torch.h>  // first: glog's CHECK must not win over doctest's

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "integration/cli_helpers.h"
#include "support/skip.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace {

const char* kAddr0 = "10.213.7.1";
const char* kAddr1 = "10.213.7.2";

int shell(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two namespaces with a veth pair between them, made directly inside them
// (the machine's own namespace is never touched); deleted at scope exit,
// which also removes the pair.
class NamespacePair {
 public:
  NamespacePair() {
    const std::string id = std::to_string(::getpid());
    ns_[0] = "accel-nn-" + id + "-0";
    ns_[1] = "accel-nn-" + id + "-1";
    veth_[0] = "acn" + id + "a";  // interface names: at most 15 characters
    veth_[1] = "acn" + id + "b";
  }
  ~NamespacePair() {
    for (const auto& ns : ns_) shell("ip netns del " + ns + " >/dev/null 2>&1");
  }
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  // Empty when ready, else why not.
  std::string make(const fs::path& log) {
    if (::geteuid() != 0) return "not root (network namespaces need CAP_SYS_ADMIN)";
    if (shell("command -v ip >/dev/null 2>&1") != 0) return "no `ip` command (install iproute2)";
    const std::string q = " >>" + log.string() + " 2>&1";
    if (shell("ip netns add " + ns_[0] + q) != 0) return "`ip netns add` failed: " + slurp(log);
    const std::vector<std::string> steps = {
        "ip netns add " + ns_[1],
        "ip -n " + ns_[0] + " link add " + veth_[0] + " type veth peer name " + veth_[1] +
            " netns " + ns_[1],
        "ip -n " + ns_[0] + " addr add " + kAddr0 + "/30 dev " + veth_[0],
        "ip -n " + ns_[1] + " addr add " + kAddr1 + "/30 dev " + veth_[1],
        "ip -n " + ns_[0] + " link set " + veth_[0] + " up",
        "ip -n " + ns_[1] + " link set " + veth_[1] + " up",
        "ip -n " + ns_[0] + " link set lo up",
        "ip -n " + ns_[1] + " link set lo up"};
    for (const auto& s : steps) {
      if (shell(s + q) != 0) return "`" + s + "` failed: " + slurp(log);
    }
    return "";
  }

  const std::string& ns(int i) const { return ns_[i]; }
  const std::string& veth(int i) const { return veth_[i]; }

 private:
  std::string ns_[2], veth_[2];
};

// A small DDP job on synthetic data: 72 training images, so 4 steps of 8 per rank
// on 2 ranks, every step logged.
std::string write_config(const accel_test::TempDir& d) {
  return d
      .write("netns-ddp.json", R"({
  "name": "netns-ddp",
  "model": { "preset": "vit_tiny_fmnist", "depth": 2 },
  "data": { "dataset": "synthetic", "synthetic_train": 96, "synthetic_test": 32, "val_fraction": 0.25 },
  "optim": { "name": "adam", "lr": 1e-3 },
  "train": { "epochs": 1, "batch_size": 8, "eval_batch_size": 16, "log_every": 1,
             "limit_train_batches": 4, "limit_eval_batches": 2, "warmup_steps": 1,
             "loop": "fabric", "save_checkpoint": false },
  "runtime": { "strategy": "ddp", "threads": 1, "timeout_s": 60 }
})")
      .string();
}

// No job variables inherited from whatever runs the tests.
const std::string kCleanEnv =
    "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u GROUP_RANK -u GROUP_WORLD_SIZE "
    "-u MASTER_ADDR -u MASTER_PORT -u ACCEL_BENCH_LAUNCHED -u SLURM_PROCID -u SLURM_NTASKS "
    "-u ACCEL_STORE_TOKEN -u TORCHELASTIC_USE_AGENT_STORE ";

// One rank of a 2-node job (1 device per node) inside namespace `i`.
std::string node_command(const NamespacePair& p, int i, const std::string& cfg, const fs::path& out,
                         const std::string& extra_env = "") {
  return "ip netns exec " + p.ns(i) + " " + kCleanEnv + extra_env + "RANK=" + std::to_string(i) +
         " WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=" + std::to_string(i) +
         " MASTER_ADDR=" + kAddr0 + " MASTER_PORT=29500 GLOO_SOCKET_IFNAME=" + p.veth(i) +
         " timeout -k 5 300 " + ACCEL_BENCH_EXE + " run -c " + cfg +
         " --set runtime.devices=1 --set runtime.num_nodes=2 --out " + out.string() + " > " +
         out.string() + ".log 2>&1";
}

// The per-step training losses of a run (rows of kind "step"), in order.
std::vector<double> train_losses(const fs::path& run) {
  std::ifstream csv(run / "metrics.csv");
  std::string line;
  std::getline(csv, line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string f; std::getline(hs, f, ',');) header.push_back(f);
  const auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const size_t kind = col("kind"), loss = col("loss");
  std::vector<double> out;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    if (f.size() > std::max(kind, loss) && f[kind] == "step" && !f[loss].empty()) {
      out.push_back(std::stod(f[loss]));
    }
  }
  return out;
}

double test_acc(const fs::path& run) {
  std::ifstream in(run / "result.json");
  return nlohmann::json::parse(in).at("test_acc").get<double>();
}

// Makes the pair; where this machine cannot (no root, no `ip`), says why
// and the test returns without checking anything.
bool made_or_skipped(NamespacePair& pair, const fs::path& log) {
  const std::string why = pair.make(log);
  if (why.empty()) return true;
  accel_test::skip(why);
  return false;
}

}  // namespace

TEST_CASE("multinode: one rank in each of two network namespaces equals the 2-rank local run") {
  accel_test::TempDir d;
  NamespacePair pair;
  if (!made_or_skipped(pair, d / "ip.log")) return;
  const std::string cfg = write_config(d);

  // The reference: `accel-bench run` starts both ranks itself on loopback.
  const auto local = d / "local";
  const int local_rc = shell(kCleanEnv + "timeout -k 5 300 " + ACCEL_BENCH_EXE + " run -c " + cfg +
                             " --set runtime.devices=2 --out " + local.string() + " > " +
                             local.string() + ".log 2>&1");
  INFO("local run:\n" << slurp(local.string() + ".log"));
  REQUIRE(local_rc == 0);

  // The two nodes, concurrently; rank 1 reaches rank 0 only over the veth pair.
  const auto n0 = d / "node0", n1 = d / "node1";
  const int rc = shell("(" + node_command(pair, 0, cfg, n0) + ") & p0=$!; " + node_command(pair, 1, cfg, n1) +
                       "; r1=$?; wait $p0; r0=$?; echo \"$r0 $r1\" > " + (d / "rc").string() + "; [ $r0 = 0 ] && [ $r1 = 0 ]");
  INFO("node 0:\n" << slurp(n0.string() + ".log"));
  INFO("node 1:\n" << slurp(n1.string() + ".log"));
  INFO("exit codes (node 0, node 1): " << slurp(d / "rc"));
  REQUIRE(rc == 0);

  // Rank 0 writes the results; they match the local job step for step.
  const auto want = train_losses(local), got = train_losses(n0);
  REQUIRE(want.size() == 4);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("step " << i);
    CHECK(std::abs(got[i] - want[i]) <= 1e-6);
  }
  CHECK(std::abs(test_acc(n0) - test_acc(local)) <= 1e-9);
  CHECK_FALSE(fs::exists(n1 / "result.json"));
  // Without a shared secret the run says its store was open to the network.
  std::ifstream in(n0 / "result.json");
  const auto warnings = nlohmann::json::parse(in).at("warnings").dump();
  CHECK(warnings.find("ACCEL_STORE_TOKEN") != std::string::npos);
}

TEST_CASE("multinode: rank 0's store listens on MASTER_ADDR only, a stalled client keeps no rank alive, and a shared secret is used" * doctest::test_suite("process")) {
  accel_test::TempDir d;
  NamespacePair pair;
  if (!made_or_skipped(pair, d / "ip.log")) return;
  const std::string cfg = write_config(d);
  const std::string token = "ACCEL_STORE_TOKEN=netns-test-secret-0123456789 ";
  const auto n0 = d / "node0", n1 = d / "node1";
  // Node 0 first, in the background; rank 0 hosts the store while it waits for rank 1.
  REQUIRE(shell("(" + node_command(pair, 0, cfg, n0, token) + "; echo $? > " + (d / "rc0").string() +
                ") &") == 0);
  const std::string ss = "ip netns exec " + pair.ns(0) + " ss -Hltn 'sport = :29500' > " +
                         (d / "listen").string() + " 2>&1";
  for (int i = 0; i < 600 && slurp(d / "listen").find("29500") == std::string::npos; ++i) {
    shell(ss);
    if (slurp(d / "listen").find("29500") == std::string::npos) ::usleep(100000);
  }
  const std::string listening = slurp(d / "listen");
  // A client on the other node that connects, sends part of a greeting and holds on.
  const auto held = d / "held.pid";
  REQUIRE(shell("ip netns exec " + pair.ns(1) + " bash -c 'echo $$ > " + held.string() +
                "; exec 3<>/dev/tcp/" + kAddr0 + "/29500; printf ACCE >&3; exec sleep 600' "
                ">/dev/null 2>&1 &") == 0);
  ::usleep(300000);
  const int rc1 = shell(node_command(pair, 1, cfg, n1, token));
  for (int i = 0; i < 3000 && !fs::exists(d / "rc0"); ++i) ::usleep(100000);
  const std::string rc0 = slurp(d / "rc0");
  const bool intruder_alive = shell("kill -0 $(cat " + held.string() + ") 2>/dev/null") == 0;
  shell("kill $(cat " + held.string() + ") 2>/dev/null");
  INFO("node 0:\n" << slurp(n0.string() + ".log"));
  INFO("node 1:\n" << slurp(n1.string() + ".log"));
  INFO("listening in node 0: " << listening);
  CHECK(rc1 == 0);
  CHECK(rc0 == "0\n");  // rank 0 finished while the stalled client still held its connection
  CHECK(intruder_alive);
  CHECK(listening.find(std::string(kAddr0) + ":29500") != std::string::npos);
  for (const char* any : {"0.0.0.0:29500", "*:29500", "[::]:29500"}) {
    CHECK(listening.find(any) == std::string::npos);
  }
  CHECK(slurp(n0.string() + ".log").find("authenticated by ACCEL_STORE_TOKEN") != std::string::npos);
  std::ifstream in(n0 / "result.json");
  const auto result = nlohmann::json::parse(in);
  CHECK(result.at("status") == "ok");
  CHECK(result.at("warnings").dump().find("trusted network") == std::string::npos);
}

TEST_CASE("multinode: a flood of connects to rank 0's store from the other node slows rendezvous but the job finishes" * doctest::test_suite("process")) {
  accel_test::TempDir d;
  NamespacePair pair;
  if (!made_or_skipped(pair, d / "ip.log")) return;
  const std::string cfg = write_config(d);
  const std::string token = "ACCEL_STORE_TOKEN=netns-flood-secret-0123456789 ";
  // From node 1: four loops that connect to the store's port and close, as
  // fast as bash can, before and while the ranks meet.
  const std::string loop = "while :; do exec 3<>/dev/tcp/" + std::string(kAddr0) +
                           "/29500 && exec 3>&- && echo >> " + (d / "connects").string() + "; done";
  REQUIRE(shell("ip netns exec " + pair.ns(1) + " bash -c '" + loop + "' >/dev/null 2>&1 & "
                "ip netns exec " + pair.ns(1) + " bash -c '" + loop + "' >/dev/null 2>&1 & "
                "ip netns exec " + pair.ns(1) + " bash -c '" + loop + "' >/dev/null 2>&1 & "
                "ip netns exec " + pair.ns(1) + " bash -c '" + loop + "' >/dev/null 2>&1 &") == 0);
  const auto n0 = d / "node0", n1 = d / "node1";
  // Rank 0 first: its store waits for rank 1 under the flood for two seconds.
  const int rc = shell("(" + node_command(pair, 0, cfg, n0, token) + ") & p0=$!; sleep 2; " +
                       node_command(pair, 1, cfg, n1, token) + "; r1=$?; wait $p0; r0=$?; echo \"$r0 $r1\" > " +
                       (d / "rc").string() + "; [ $r0 = 0 ] && [ $r1 = 0 ]");
  shell("ip netns pids " + pair.ns(1) + " | xargs -r kill -9 2>/dev/null");
  const std::string lines = slurp(d / "connects");
  const auto connects = std::count(lines.begin(), lines.end(), '\n');
  MESSAGE("connects from node 1 while the job ran: " << connects);
  INFO("node 0:\n" << slurp(n0.string() + ".log"));
  INFO("node 1:\n" << slurp(n1.string() + ".log"));
  INFO("exit codes (node 0, node 1): " << slurp(d / "rc"));
  CHECK(rc == 0);
  CHECK(connects > 500);  // the store was under a flood while the ranks met
  std::ifstream in(n0 / "result.json");
  CHECK(nlohmann::json::parse(in).at("status") == "ok");
}
