// Multi-process runs through the real CLI, 2 ranks over Gloo on real
// Fashion-MNIST: DDP equals one process on the global batch, torchrun-style
// environments join without spawning, a killed rank stops the job, a stop
// signal makes every rank stop at the same step with a resumable checkpoint.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "accel/util/json.h"

#include "accel/results/compare.h"
#include "accel/train/checkpoint.h"
#include "accel/train/result.h"
#include "integration/cli_helpers.h"
#include "support/skip.h"

namespace fs = std::filesystem;
using namespace cli_test;

namespace {

// The smoke config, 8 batches, every step logged, one thread per rank.
std::string smoke(int batch, int batches) {
  return " -c " + source("configs/smoke/scratch-smoke.json") +
         " --set train.loop=fabric --set train.batch_size=" + std::to_string(batch) +
         " --set train.limit_train_batches=" + std::to_string(batches) +
         " --set train.limit_eval_batches=2 --set runtime.threads=1 -q";
}

nlohmann::json result_of(const fs::path& dir) {
  std::ifstream in(dir / "result.json");
  return nlohmann::json::parse(in);
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> kids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent) kids.push_back(pid_t(std::stol(name)));
  }
  return kids;
}

// Starts the CLI in the background with its output in `log`.
pid_t spawn_cli(const std::string& args, const fs::path& log) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string cmd = std::string("exec ") + ACCEL_BENCH_EXE + " " + args + " > " +
                            log.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  return pid;
}

// Starts one rank of a 2-rank job as torchrun would: the rank's variables in
// its environment, no launcher; its output in `log`.
pid_t spawn_rank(int rank, int port, const std::string& args, const fs::path& log) {
  const std::string env = "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
                          " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(port) + " ";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string cmd = "exec env " + env + ACCEL_BENCH_EXE + " " + args + " > " +
                            log.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Until the run in `out` trains: its stop handlers are set before it writes
// config.json (every rank's before the rendezvous that precedes it), and
// 0.3 s later it is loading data or taking its first steps. The runs these
// tests stop last seconds, not 0.3 s, on machines of this kind; a run that
// ends before the signal fails the test rather than skipping its check.
void wait_for_training(const fs::path& out) {
  for (int i = 0; i < 600 && !fs::exists(out / "config.json"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

std::string slurp(const fs::path& f) {
  std::ifstream in(f);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("cli: ddp on 2 ranks with half batches equals one process on the global batch") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto one = fresh_dir("ddp-one"), two = fresh_dir("ddp-two");
  // Adam's eps raised from 1e-8: some in_proj_bias gradients are zero but for
  // rounding (~1e-9), and eps 1e-8 turns their sign into lr-sized steps, so
  // any reduction-order difference (LibTorch 2.x) would show as 1e-3 in weights.
  const std::string eps = " --set optim.eps=1e-4";
  auto r = run_cli("run" + smoke(16, 6) + eps + " --out " + one.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + smoke(8, 6) + eps +
              " --set runtime.devices=2 --set runtime.strategy=ddp --out " + two.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  // Same per-step (global-batch) losses, same weights, same accuracy.
  r = run_cli("compare-losses " + one.string() + " " + two.string() + " --tolerance 5e-5");
  CHECK_MESSAGE(r.code == 0, r.output);
  check_checkpoints_match(one / "checkpoint.ckpt", two / "checkpoint.ckpt", 1.3e-6, 5e-5);
  const auto a = result_of(one), b = result_of(two);
  CHECK(b["world_size"] == 2);
  CHECK(b["strategy"] == "ddp");
  CHECK(b["peak_memory_bytes"].size() == 2);
  CHECK(b["ranks"].size() == 2);
  // (test accuracy: limit_eval_batches counts per rank, so the sets differ;
  // the next test compares a whole evaluation.)
  CHECK(a["epochs"][0]["val_acc"].get<double>() ==
        doctest::Approx(b["epochs"][0]["val_acc"].get<double>()).epsilon(1e-3));
  // Only rank 0 wrote: no second result, and one banner in the output.
  CHECK(b["images_per_s"].get<double>() ==
        doctest::Approx(2 * b["images_per_s_per_device"].get<double>()));
}

TEST_CASE("cli: ddp trains bitwise the same whether ranks spin or block and in one bucket or many") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  // runtime.comm_wait only changes how a rank waits, and the bucket layout
  // only which gradients travel together: each averaged element is the same
  // sum of the same two values either way.
  const auto spin = fresh_dir("ddp-spin"), block = fresh_dir("ddp-block");
  const std::string ddp = smoke(8, 4) + " --set runtime.devices=2 --set runtime.strategy=ddp";
  auto r = run_cli("run" + ddp + " --set runtime.comm_wait=spin --out " + spin.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + ddp + " --set runtime.comm_wait=block --set runtime.bucket_mb=0.01 --out " +
              block.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto a = result_of(spin), b = result_of(block);
  CHECK(a["env"]["comm_wait"] == "spin");
  CHECK(b["env"]["comm_wait"] == "block");
  r = run_cli("compare-losses " + spin.string() + " " + block.string() + " --tolerance 0");
  CHECK_MESSAGE(r.code == 0, r.output);
  const auto ta = accel::train::read_checkpoint(spin / "checkpoint.ckpt").model_tensors();
  const auto tb = accel::train::read_checkpoint(block / "checkpoint.ckpt").model_tensors();
  REQUIRE(ta.size() == tb.size());
  for (const auto& [name, tensor] : ta) {
    INFO(name);
    CHECK(torch::equal(tensor, tb.at(name)));
  }
}

TEST_CASE("cli: evaluation over 2 ranks counts every test image once") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  // The whole test set of three classes, 3000 images: 91 batches of 33 over 2
  // ranks, an odd count, so the sampler pads (a third of the full set's time).
  const auto one = fresh_dir("eval-one"), two = fresh_dir("eval-two");
  const std::string eval = " --set train.eval_batch_size=33 --set train.limit_eval_batches=0"
                           " --set data.train_subset=100 --set data.classes=[5,6,7]";
  auto r = run_cli("run" + smoke(8, 2) + eval + " --out " + one.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + smoke(4, 2) + eval + " --set runtime.devices=2 --out " + two.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto a = result_of(one), b = result_of(two);
  CHECK(b["strategy"] == "ddp");  // auto on 2 ranks
  CHECK(a["test_acc"].get<double>() == doctest::Approx(b["test_acc"].get<double>()).epsilon(1e-4));
  CHECK(a["test_loss"].get<double>() == doctest::Approx(b["test_loss"].get<double>()).epsilon(1e-4));
}

TEST_CASE("cli: best_val on 2 ranks picks and tests the same weights under ddp, fsdp and zero-2") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const std::string args = smoke(8, 6) +
                           " --set train.epochs=2 --set train.val_every_steps=2 --set optim.lr=3e-3"
                           " --set optim.eps=1e-4 --set train.test_weights=best_val"
                           " --set runtime.devices=2";
  nlohmann::json ddp;
  for (const char* strategy : {"ddp", "fsdp", "deepspeed_stage_2"}) {
    INFO(strategy);
    const auto out = fresh_dir(std::string("best-") + strategy);
    const auto r = run_cli("run" + args + " --set runtime.strategy=" + strategy + " --out " +
                           out.string());
    REQUIRE_MESSAGE(r.code == 0, r.output);
    const auto res = result_of(out);
    CHECK(fs::exists(out / "best.ckpt"));
    if (ddp.is_null()) {
      ddp = res;
    } else {
      CHECK(res["best_val"] == ddp["best_val"]);
      CHECK(res["test_acc"].get<double>() == doctest::Approx(ddp["test_acc"].get<double>()).epsilon(1e-6));
      CHECK(res["test_acc_last"].get<double>() ==
            doctest::Approx(ddp["test_acc_last"].get<double>()).epsilon(1e-6));
    }
    fs::remove_all(out);
  }
}

TEST_CASE("cli: ranks started with torchrun variables join without spawning") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto launched = fresh_dir("tr-launched"), joined = fresh_dir("tr-joined");
  const auto logs = fresh_dir("tr-logs");
  fs::create_directories(logs);
  const std::string args = "run" + smoke(8, 3) + " --set runtime.devices=2";
  auto r = run_cli(args + " --out " + launched.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const int port = 21000 + int(::getpid() % 20000);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pids.push_back(spawn_rank(rank, port, args + " --out " + joined.string(),
                              logs / std::to_string(rank)));
  }
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank << ": " << slurp(logs / std::to_string(rank)));
    CHECK(wait_exit(pids[size_t(rank)], std::chrono::seconds(240)) == 0);
  }
  r = run_cli("compare-losses " + launched.string() + " " + joined.string() + " --tolerance 0");
  CHECK_MESSAGE(r.code == 0, r.output);
}

TEST_CASE("cli: torchrun's own launcher runs a 2-rank job through its agent's store") {
  // torchrun (static rendezvous) hosts a TCPStore for its workers and tells
  // them so (TORCHELASTIC_USE_AGENT_STORE=True): rank 0 must join it as a
  // client, not host a store on the same port. It needs a torchrun whose torch
  // is this build's LibTorch (TCPStore's protocol changed between versions):
  // the CUDA leg sets ACCEL_TORCHRUN to its venv's.
  const char* torchrun = std::getenv("ACCEL_TORCHRUN");
  if (torchrun == nullptr || *torchrun == '\0') {
    accel_test::skip("ACCEL_TORCHRUN not set (the CUDA leg sets it to the torchrun of its torch)");
    return;
  }
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto launched = fresh_dir("torchrun-ours"), joined = fresh_dir("torchrun-theirs");
  const std::string args = "run" + smoke(8, 3) + " --set runtime.devices=2";
  auto r = run_cli(args + " --out " + launched.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const int port = 21000 + int((::getpid() + 13) % 20000);
  const std::string cmd = std::string("env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT ") +
                          torchrun + " --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1" +
                          " --master-port " + std::to_string(port) + " --no-python " +
                          ACCEL_BENCH_EXE + " " + args + " --out " + joined.string() + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string log;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) log.append(buf, n);
  const int st = pclose(pipe);
  INFO(log);
  REQUIRE((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  // It met in torchrun's store (its warnings say so), not in one of its own.
  CHECK(result_of(joined).at("warnings").dump().find("torchrun's store on 127.0.0.1:" +
                                                     std::to_string(port)) != std::string::npos);
  r = run_cli("compare-losses " + launched.string() + " " + joined.string() + " --tolerance 0");
  CHECK_MESSAGE(r.code == 0, r.output);
}

// The TCP sockets `pid` listens on, as "address:port" in /proc/net/tcp{,6}'s hex.
std::vector<std::string> listening_sockets(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const auto target = fs::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (st == "0A" && inodes.count(inode)) out.push_back(local);  // 0A: LISTEN
    }
  }
  return out;
}

TEST_CASE("cli: a local 2-rank run meets in a private store and listens on nothing beyond loopback" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto out = fresh_dir("listen"), logs = fresh_dir("listen-logs");
  fs::create_directories(logs);
  const pid_t launcher = spawn_cli("run" + smoke(8, 40) + " --set train.epochs=2 --set runtime.devices=2"
                                   " --out " + out.string(), logs / "log");
  wait_for_training(out);
  const auto ranks = children_of(launcher);
  CHECK(ranks.size() == 2);
  std::vector<std::string> all;
  for (const pid_t r : ranks) {
    for (const auto& a : listening_sockets(r)) all.push_back(a);
  }
  for (const pid_t p : {launcher}) {
    for (const auto& a : listening_sockets(p)) all.push_back(a);
  }
  // 127.0.0.1 is 0100007F in the IPv4 table; ::1 ends in 01000000 in the IPv6 one.
  for (const auto& a : all) {
    INFO("listening on " << a);
    const auto addr = a.substr(0, a.find(':'));
    CHECK((addr == "0100007F" || addr == "00000000000000000000000001000000"));
  }
  std::string log = slurp(logs / "log");
  const auto at = log.find("store in ");
  REQUIRE_MESSAGE(at != std::string::npos, log);
  const std::string dir = log.substr(at + 9, log.find(' ', at + 9) - at - 9);
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);  // this user only
  const int code = wait_exit(launcher, std::chrono::seconds(240));
  INFO(slurp(logs / "log"));
  CHECK(code == 0);
  CHECK_FALSE(fs::exists(dir));  // removed with the launch
}

TEST_CASE("cli: the local launcher reads MASTER_PORT from the environment as config --explain says" * doctest::test_suite("process")) {
  const auto out = fresh_dir("master-port");
  auto r = run_cli_env("MASTER_PORT=abc", "run" + smoke(8, 2) + " --set runtime.devices=2 --out " +
                                              out.string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("MASTER_PORT: \"abc\" is not a TCP port") != std::string::npos);
  r = run_cli("config --explain");
  CHECK(r.output.find("MASTER_PORT from the environment") != std::string::npos);
}

TEST_CASE("cli: a local 2-rank run does not need its master_port: a busy one is no failure" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  // Someone else listens on the port the config names (the store of a local
  // run was rank 0's TCPStore there, which failed only after a grace wait).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  const auto out = fresh_dir("busy-port");
  const auto r = run_cli("run" + smoke(8, 2) + " --set runtime.devices=2 --set runtime.master_port=" +
                         std::to_string(port) + " --out " + out.string());
  ::close(fd);
  INFO(r.output);
  CHECK(r.code == 0);
}

TEST_CASE("cli: a second process claiming a rank already taken is refused at rendezvous, naming the rank" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto out = fresh_dir("dup-rank"), logs = fresh_dir("dup-rank-logs");
  fs::create_directories(logs);
  const std::string args = "run" + smoke(8, 3) + " --set runtime.devices=2 --out " + out.string();
  const int port = 21000 + int((::getpid() + 7) % 20000);
  std::vector<pid_t> pids;
  for (const auto& [rank, log] : {std::pair{0, "r0"}, std::pair{1, "r1a"}, std::pair{1, "r1b"}}) {
    pids.push_back(spawn_rank(rank, port, args, logs / log));
  }
  std::vector<int> codes;
  for (const pid_t p : pids) codes.push_back(wait_exit(p, std::chrono::seconds(240)));
  const std::string a = slurp(logs / "r1a"), b = slurp(logs / "r1b");
  INFO("rank 0: " << slurp(logs / "r0") << "\nrank 1 (a): " << a << "\nrank 1 (b): " << b);
  CHECK(codes[0] == 0);  // the job ran with the first claimant
  const std::string refused = "rank 1 is already taken by another process";
  // Exactly one of the two claimants of rank 1 was refused, the other trained.
  CHECK(((codes[1] == 0 && codes[2] != 0) || (codes[1] != 0 && codes[2] == 0)));
  CHECK((a.find(refused) != std::string::npos) != (b.find(refused) != std::string::npos));
}

TEST_CASE("cli: ranks given different configs refuse to train and name the rank") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto out = fresh_dir("hash"), logs = fresh_dir("hash-logs");
  fs::create_directories(logs);
  const int port = 21000 + int((::getpid() + 7919) % 20000);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    // Rank 1 was given another learning rate: its resolved config differs.
    const std::string args = "run" + smoke(8, 3) + " --set runtime.devices=2" +
                             (rank == 1 ? " --set optim.lr=0.5" : "");
    pids.push_back(spawn_rank(rank, port, args + " --out " + out.string(),
                              logs / std::to_string(rank)));
  }
  CHECK(wait_exit(pids[0], std::chrono::seconds(240)) == 2);  // a config error
  CHECK(wait_exit(pids[1], std::chrono::seconds(240)) == 2);
  const auto log0 = slurp(logs / "0");
  INFO(log0);
  CHECK(log0.find("rank 1 runs another resolved config than rank 0") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "result.json"));
  CHECK_FALSE(fs::exists(out / "metrics.csv"));
}

TEST_CASE("cli: a rank killed by SIGKILL stops the job with a non-zero exit naming it" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto out = fresh_dir("kill"), logs = fresh_dir("kill-logs");
  fs::create_directories(logs);
  const pid_t launcher = spawn_cli("run" + smoke(8, 0) +
                                       " --set train.epochs=50 --set runtime.devices=2"
                                       " --set runtime.timeout_s=20 --out " + out.string(),
                                   logs / "log");
  // Wait until both ranks are up, then kill rank 1 (the second child).
  std::vector<pid_t> ranks;
  for (int i = 0; i < 600 && ranks.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ranks = children_of(launcher);
  }
  REQUIRE(ranks.size() == 2);
  std::sort(ranks.begin(), ranks.end());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ::kill(ranks[1], SIGKILL);
  const int code = wait_exit(launcher, std::chrono::seconds(90));
  const auto log = slurp(logs / "log");
  INFO(log);
  CHECK(code != 0);
  CHECK(code != -1);  // it ended by itself, within the bound
  CHECK(log.find("rank 1") != std::string::npos);
  CHECK(log.find("SIGKILL") != std::string::npos);
  for (pid_t p : ranks) CHECK(::kill(p, 0) != 0);  // no rank left behind
  if (fs::exists(out / "result.json")) CHECK(result_of(out)["status"] == "failed");
}

TEST_CASE("cli: SIGTERM stops every rank at the same step and --resume auto finishes the run") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto full = fresh_dir("term-full"), cut = fresh_dir("term-cut"), logs = fresh_dir("term-logs");
  fs::create_directories(logs);
  const std::string args = "run" + smoke(8, 40) + " --set runtime.devices=2 --set train.epochs=2";
  auto r = run_cli(args + " --out " + full.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const pid_t launcher = spawn_cli(args + " --out " + cut.string(), logs / "log");
  wait_for_training(cut);  // stop it once it has trained a little
  ::kill(launcher, SIGTERM);
  const int code = wait_exit(launcher, std::chrono::seconds(120));
  INFO(slurp(logs / "log"));
  REQUIRE_MESSAGE(code != 0, "the run finished before the signal arrived: make it longer");
  REQUIRE(code == 3);
  const auto res = result_of(cut);
  CHECK(res["status"] == "interrupted");
  REQUIRE(fs::exists(cut / "checkpoint.ckpt"));
  r = run_cli(args + " --out " + cut.string() + " --resume auto");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + full.string() + " " + cut.string() + " --tolerance 0");
  CHECK_MESSAGE(r.code == 0, r.output);
  check_checkpoints_match(full / "checkpoint.ckpt", cut / "checkpoint.ckpt", 0, 0);
}

TEST_CASE("cli: a second run into the same --out is refused at once naming the first run's pid, on one and two ranks" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  for (const int devices : {1, 2}) {
    CAPTURE(devices);
    const auto out = fresh_dir("lock-" + std::to_string(devices));
    const auto logs = fresh_dir("lock-logs-" + std::to_string(devices));
    fs::create_directories(logs);
    const std::string args = "run" + smoke(8, 40) + " --set train.epochs=2 --set runtime.devices=" +
                             std::to_string(devices) + " --out " + out.string();
    const pid_t first = spawn_cli(args, logs / "log");
    wait_for_training(out);
    // Another experiment into the same folder, with and without --force.
    for (const char* force : {"", " --force"}) {
      const auto r = run_cli(args + " --set train.seed=7" + force);
      INFO(r.output);
      CHECK(r.code == 2);
      CHECK(r.output.find("another run (pid " + std::to_string(first) + ") is writing into this folder") !=
            std::string::npos);
    }
    const int code = wait_exit(first, std::chrono::seconds(240));
    INFO(slurp(logs / "log"));
    REQUIRE(code == 0);
    // Every file is the first run's.
    const auto res = result_of(out);
    std::ifstream in(out / "config.json");
    const auto cfg = nlohmann::json::parse(in);
    CHECK(res["config"]["train"]["seed"] == cfg["train"]["seed"]);
    CHECK(cfg["train"]["seed"] != 7);
    // Once it has ended the folder is free again.
    if (devices == 1) CHECK(run_cli(args + " --resume auto").code == 0);
  }
}

TEST_CASE("cli: --force removes the replaced run's checkpoints before writing, so nothing of it can be resumed" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto out = fresh_dir("force-clear");
  auto r = run_cli("run" + smoke(8, 6) + " --set train.checkpoint_every=2 --out " + out.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  REQUIRE(fs::exists(out / "checkpoints" / "step-00000004.ckpt"));
  // Without -q, to see what it says it removed.
  r = run_cli("run -c " + source("configs/smoke/scratch-smoke.json") +
              " --set train.limit_train_batches=3 --set train.limit_eval_batches=1 "
              "--set train.seed=7 --force --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("== --force: removed the replaced run's result.json, metrics.csv, config.json, "
                      "checkpoint.ckpt, checkpoints/step-00000002.ckpt") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "checkpoints"));
  CHECK(result_of(out)["config"]["train"]["seed"] == 7);
  // A refused run leaves no folder behind; an empty --out is an error.
  const auto refused = fresh_dir("refused-run");
  r = run_cli("run" + smoke(8, 2) + " --set train.batch_size=100000 --out " + refused.string());
  CHECK(r.code == 2);
  CHECK_FALSE(fs::exists(refused));
  r = run_cli("run" + smoke(8, 2) + " --out ''");
  CHECK(r.code == 2);
  CHECK(r.output.find("--out: an empty path") != std::string::npos);
}

TEST_CASE("cli: a stopped rank is named as the one that stopped answering and the job leaves a failed result" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  // Rank 0, the one that writes the result, is the one stopped.
  const auto out = fresh_dir("stopped"), logs = fresh_dir("stopped-logs");
  fs::create_directories(logs);
  const pid_t launcher = spawn_cli("run" + smoke(8, 40) + " --set train.epochs=20 --set runtime.devices=2"
                                   " --set runtime.timeout_s=10 --out " + out.string(), logs / "log");
  wait_for_training(out);
  pid_t rank0 = -1;
  for (int i = 0; i < 200 && rank0 < 0; ++i) {
    for (const pid_t p : children_of(launcher)) {
      std::ifstream env("/proc/" + std::to_string(p) + "/environ");
      std::string var;
      while (std::getline(env, var, '\0')) {
        if (var == "RANK=0") rank0 = p;
      }
    }
    if (rank0 < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(rank0 > 0);
  ::kill(rank0, SIGSTOP);
  const int code = wait_exit(launcher, std::chrono::seconds(180));
  const auto log = slurp(logs / "log");
  INFO(log);
  CHECK(code == 1);
  CHECK(log.find("rank 0 (pid " + std::to_string(rank0) + ") stopped answering") != std::string::npos);
  REQUIRE(fs::exists(out / "result.json"));
  const auto res = result_of(out);
  CHECK(res["status"] == "failed");
  CHECK(res["error"].get<std::string>().find("rank 0") != std::string::npos);
}

TEST_CASE("cli: SIGUSR1 stops a one-process run after its step with status interrupted and exit 3" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto cut = fresh_dir("usr1-cut"), logs = fresh_dir("usr1-logs");
  fs::create_directories(logs);
  // Slurm's pre-emption warning (sbatch --signal=USR1@60) reaches the one process.
  const pid_t run = spawn_cli("run" + smoke(8, 30) + " --set train.epochs=3 --out " + cut.string(),
                              logs / "log");
  wait_for_training(cut);
  ::kill(run, SIGUSR1);
  const int code = wait_exit(run, std::chrono::seconds(120));
  const auto log = slurp(logs / "log");
  INFO(log);
  REQUIRE_MESSAGE(code != 0, "the run finished before the signal arrived: make it longer");
  CHECK(code == 3);
  CHECK(log.find("--resume auto") != std::string::npos);
  const auto res = result_of(cut);
  CHECK(res["status"] == "interrupted");
  CHECK(res["steps"].get<int>() > 0);           // what was done so far
  CHECK(res["train_time_s"].get<double>() > 0);  // with its timings
  CHECK(fs::exists(cut / "checkpoint.ckpt"));
  CHECK(fs::exists(cut / "metrics.csv"));
}

TEST_CASE("cli: a second stop signal ends a one-process run at once" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto out = fresh_dir("term2"), logs = fresh_dir("term2-logs");
  fs::create_directories(logs);
  // The first signal asks for a stop after the step, the second ends the run
  // at once. Both must arrive before the graceful stop completes, whatever a
  // step takes on this machine: the run is stopped (SIGSTOP) while SIGINT and
  // SIGTERM are queued (two different signals, so the kernel keeps both), and
  // continued, so both are delivered before it runs another instruction of its own.
  const pid_t run = spawn_cli("run" + smoke(64, 0) + " --set train.epochs=50 --out " + out.string(),
                              logs / "log");
  wait_for_training(out);
  ::kill(run, SIGSTOP);
  int st = 0;
  REQUIRE(::waitpid(run, &st, WUNTRACED) == run);
  REQUIRE(WIFSTOPPED(st));
  ::kill(run, SIGINT);
  ::kill(run, SIGTERM);
  ::kill(run, SIGCONT);
  const int code = wait_exit(run, std::chrono::seconds(60));
  INFO(slurp(logs / "log"));
  // The default action of whichever signal came second, not the graceful exit 3.
  CHECK((code == 128 + SIGTERM || code == 128 + SIGINT));
}

TEST_CASE("cli: predict's collectives per step are the bytes and calls ddp, fsdp and zero-2 send") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  // Any comm fit will do: the bytes and calls do not depend on it, only the times.
  const auto dir = fresh_dir("predict-bytes");
  fs::create_directories(dir);
  const auto calibration = dir / "peaks.json";
  {
    nlohmann::json fit = {{"alpha_s", 1e-4}, {"beta_s_per_byte", 1e-9}, {"points", nlohmann::json::array()}};
    nlohmann::json doc = {{"comm", {{"backend", "gloo"}, {"ranks", 2}, {"threads_per_rank", 1},
                                    {"collectives", {{"all_reduce", fit}, {"all_gather", fit}, {"reduce_scatter", fit}}}}}};
    std::ofstream(calibration) << doc.dump();
  }
  for (const auto& [strategy, precision] : {std::pair{"ddp", "32-true"}, std::pair{"fsdp", "bf16-mixed"},
                                            std::pair{"deepspeed_stage_2", "32-true"}}) {
    INFO(strategy << " " << precision);
    const std::string args = "run" + smoke(8, 4) + " --set runtime.precision=" + precision;
    const auto one = dir / (std::string("one-") + strategy), two = dir / (std::string("two-") + strategy);
    auto r = run_cli(args + " --out " + one.string());
    REQUIRE_MESSAGE(r.code == 0, r.output);
    r = run_cli(args + " --set runtime.devices=2 --set runtime.strategy=" + strategy + " --out " + two.string());
    REQUIRE_MESSAGE(r.code == 0, r.output);
    const auto json = dir / (std::string("predict-") + strategy + ".json");
    r = run_cli("predict " + (one / "result.json").string() + " --devices 1,2 --strategy " + strategy +
                " --calibration " + calibration.string() + " --measured " + (two / "result.json").string() +
                " --json " + json.string());
    REQUIRE_MESSAGE(r.code == 0, r.output);
    std::ifstream in(json);
    const auto predicted = nlohmann::json::parse(in).at("rows").at(1);
    const auto sent = result_of(two).at("comm_per_step");
    double calls = 0;
    for (const auto& c : sent.at("collectives")) calls += c.at("per_step").get<double>();
    CHECK(predicted.at("bytes_per_step").get<double>() == doctest::Approx(sent.at("bytes").get<double>()).epsilon(1e-12));
    CHECK(predicted.at("calls_per_step").get<double>() == doctest::Approx(calls));
    CHECK(r.output.find("step measured") != std::string::npos);
  }
}

TEST_CASE("cli: calibrate --comm fits each collective between 2 ranks and keeps the matmul peaks in the file") {
  const auto dir = fresh_dir("calibrate-comm");
  fs::create_directories(dir);
  const auto file = dir / "peaks.json";
  std::ofstream(file) << R"({"machine_id": "m", "cpu": {"fp32": {"1": 100.0}}})";
  const auto r = run_cli("calibrate --comm --max-bytes 262144 --out " + file.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  std::ifstream in(file);
  const auto doc = nlohmann::json::parse(in);
  CHECK(doc.at("cpu").at("fp32").at("1") == 100.0);  // kept
  const auto& comm = doc.at("comm");
  CHECK(comm.at("backend") == "gloo");
  CHECK(comm.at("ranks") == 2);
  for (const char* c : {"all_reduce", "all_gather", "reduce_scatter"}) {
    INFO(c);
    const auto& f = comm.at("collectives").at(c);
    CHECK(f.at("points").size() == 4);  // 4 KiB .. 256 KiB, x4
    CHECK(f.at("alpha_s").get<double>() >= 0);
    CHECK(f.at("beta_s_per_byte").get<double>() >= 0);
    CHECK(f.at("alpha_s").get<double>() + f.at("beta_s_per_byte").get<double>() * 262144 > 0);
  }
  // How much slower a rank computes while both do, measured (no bound on it:
  // it is what this machine does).
  const auto& co = comm.at("colocation");
  CHECK(co.at("ranks") == 2);
  CHECK(co.at("compute").get<double>() > 0);
  CHECK(co.at("memory").get<double>() > 0);
  CHECK(co.at("seconds").at("matmul_alone").get<double>() > 0);
  // The stream's bytes with its time alone: the bandwidth predict charges copies at.
  CHECK(co.at("stream_bytes").get<double>() == 3.0 * 64 * 1024 * 1024);
  CHECK(co.at("seconds").at("stream_alone").get<double>() > 0);
  CHECK(r.output.find("2 ranks computing at once on this host: matmul x") != std::string::npos);
  CHECK(r.output.find("GB/s alone)") != std::string::npos);
  // The matmul calibration run afterwards keeps the comm fit.
  REQUIRE(run_cli("calibrate --size 64 --max-threads 1 --min-seconds 0.01 --out " + file.string()).code == 0);
  std::ifstream again(file);
  CHECK(nlohmann::json::parse(again).contains("comm"));
  CHECK(run_cli("calibrate --comm --ranks 1 --out " + file.string()).code == 2);  // no collective on one
}

TEST_CASE("cli: predict from an article's one-GPU rung sets the article's 4-GPU rung beside it, and refuses what it cannot model") {
  const std::string ref = " --article " + source("results/reference/cvpr2023-vit.json") +
                          " --links " + source("results/reference/links.json");
  auto r = run_cli("predict" + ref + " --rung 04 --devices 1,4 --link nvlink3-a100 --price-per-hour 2.5");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(r.output.find("the article's rung 05 (DDP, 4 GPUs): 2.19 min measured") != std::string::npos);
  CHECK(r.output.find("forward : backward = 1 : 2") != std::string::npos);  // the stated split
  // DDP's own gradient copies, at the A100's memory bandwidth the article's workload states.
  CHECK(r.output.find("the strategy's own copies (gradients into the buckets") != std::string::npos);
  CHECK(r.output.find("the optimizer's share of the GPU's memory bandwidth") != std::string::npos);
  CHECK(r.output.find("| cost |") != std::string::npos);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {ref + " --rung 05 --link nvlink3-a100", "predict starts from a one-device rung"},
      {ref + " --rung 04 --link nvlink9", "--link: \"nvlink9\""},
      {ref + " --rung 04 --link nvlink3-a100 --nodes 2 --devices 8", "--inter-link"},
      {ref + " --rung 04 --link nvlink3-a100 --strategy single", "runs one device"},
      {ref + " --rung 04", "give --link NAME"},
      {ref + " --rung 04 --link nvlink3-a100 --devices 4,x", "--devices: \"x\""},
  };
  for (const auto& [args, why] : refused) {
    INFO(args);
    r = run_cli("predict" + args);
    CHECK(r.code == 2);
    CHECK(r.output.find(why) != std::string::npos);
  }
}

TEST_CASE("cli: a checkpoint from inside an epoch resumes only on its rank count, naming runtime.devices, and one from an epoch's end on any") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto base = fresh_dir("resume-count");
  const std::string args = "run" + smoke(8, 4) + " --set runtime.strategy=ddp";
  // Stopped after 2 of an epoch's 4 batches (train.max_steps) on 2 ranks,
  // then on 1: each resumed on the other count.
  for (const auto& [from, to] : {std::pair{2, 1}, std::pair{1, 2}}) {
    const auto mid = base / ("mid" + std::to_string(from));
    auto r = run_cli(args + " --set runtime.devices=" + std::to_string(from) +
                     " --set train.max_steps=2 --out " + mid.string());
    REQUIRE_MESSAGE(r.code == 0, r.output);
    REQUIRE(fs::exists(mid / "checkpoint.ckpt"));
    const auto again = base / ("again" + std::to_string(from));
    r = run_cli(args + " --set runtime.devices=" + std::to_string(to) + " --resume " +
                (mid / "checkpoint.ckpt").string() + " --out " + again.string());
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("stopped after 2 batches of epoch 1 on " + std::to_string(from) +
                        (from == 1 ? " rank" : " ranks") + ", and this run has " +
                        std::to_string(to)) != std::string::npos);
    CHECK(r.output.find("resume with runtime.devices=" + std::to_string(from)) != std::string::npos);
    CHECK_FALSE(fs::exists(again / "result.json"));
  }
  // At an epoch's end the sampler starts afresh: any rank count continues.
  const auto end = base / "end", again = base / "again";
  auto r = run_cli(args + " --set runtime.devices=2 --out " + end.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli(args + " --set runtime.devices=1 --set train.epochs=2 --resume " +
              (end / "checkpoint.ckpt").string() + " --out " + again.string());
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(result_of(again)["epochs"].size() == 2);
}

TEST_CASE("counters: two identical runs count the same work and --fail-counters passes them, a gradient clip moves the op calls and allocations only") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto root = fresh_dir("counters");
  const std::string run = "run" + smoke(8, 4) + " --set train.warmup_steps=2";
  for (const char* set : {"a", "b"}) {
    const auto r = run_cli(run + " --out " + (root / set / "rung").string());
    REQUIRE_MESSAGE(r.code == 0, r.output);
  }
  auto r = run_cli(run + " --set train.grad_clip=1.0 --out " + (root / "clip" / "rung").string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto a = result_of(root / "a" / "rung"), b = result_of(root / "b" / "rung");
  const auto& ca = a["counters"];
  REQUIRE(ca.is_object());
  CHECK(ca["step"] == 1);  // the last warm-up step
  CHECK(ca["op_calls"].get<int64_t>() > 100);
  CHECK(ca["op_calls_by_op"]["aten::addmm"].get<int64_t>() > 0);
  CHECK(ca["flops_counted"].get<double>() > 0);
  // What the ops were counted to do agrees with the model's own count.
  CHECK(std::fabs(ca["flops_counted_over_analytic"].get<double>() - 1.0) <= 0.01);
  // The step's tensor allocations: every gradient (set to none between
  // steps) and activation, counted exactly.
  REQUIRE(ca["allocations"].is_object());
  CHECK(ca["allocations"]["count"].get<int64_t>() > 50);
  CHECK(ca["allocations"]["peak_bytes"].get<int64_t>() > 0);
  CHECK(ca["allocations"]["peak_bytes"].get<int64_t>() <= ca["allocations"]["bytes"].get<int64_t>());
  CHECK(ca == b["counters"]);  // exact: no clock in them
  CHECK(a["step_time_ms"]["count"] == 2);  // 4 steps, 2 warm-up; the counted one is warm-up
  CHECK(a["optimizer_implementation"] == "accel-fused-cpu");  // the default on CPU float32
  r = run_cli("compare " + (root / "a").string() + " " + (root / "b").string() + " --fail-counters");
  CHECK_MESSAGE(r.code == 0, r.output);
  // Clipping adds the norm and scaling ops, not one matmul.
  const auto clip = result_of(root / "clip" / "rung");
  CHECK(clip["counters"]["op_calls"].get<int64_t>() > ca["op_calls"].get<int64_t>());
  CHECK(clip["counters"]["flops_counted"] == ca["flops_counted"]);
  CHECK(clip["counters"]["allocations"]["count"].get<int64_t>() > ca["allocations"]["count"].get<int64_t>());
  // A change in the same config's counters (as a LibTorch or code change
  // would make) fails the gate, named with both values.
  auto doctored = b;
  doctored["counters"]["op_calls_by_op"]["aten::addmm"] = ca["op_calls_by_op"]["aten::addmm"].get<int64_t>() + 1;
  std::ofstream(root / "b" / "rung" / "result.json") << doctored.dump(2);
  r = run_cli("compare " + (root / "a").string() + " " + (root / "b").string() + " --fail-counters");
  INFO(r.output);
  CHECK(r.code == 1);
  const auto n = ca["op_calls_by_op"]["aten::addmm"].get<int64_t>();
  CHECK(r.output.find("counters changed: op calls: aten::addmm " + std::to_string(n) + " -> " +
                      std::to_string(n + 1)) != std::string::npos);
  r = run_cli("compare " + (root / "a").string() + " " + (root / "b").string());  // no gate: listed only
  CHECK(r.code == 0);
  CHECK(r.output.find("| rung | op calls: aten::addmm |") != std::string::npos);
}

TEST_CASE("fault injection: train.inject_delay is warned, recorded, named by compare and changes no counter") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto root = fresh_dir("inject");
  const std::string run = "run" + smoke(6, 4) + " --set train.warmup_steps=2";
  auto r = run_cli(run + " --out " + (root / "base" / "rung").string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli(run + " --set train.inject_delay=0.2 --out " + (root / "slow" / "rung").string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto base = result_of(root / "base" / "rung"), slow = result_of(root / "slow" / "rung");
  CHECK_FALSE(base.contains("fault_injection"));
  REQUIRE(slow.contains("fault_injection"));
  CHECK(slow["fault_injection"]["inject_delay"] == 0.2);
  REQUIRE(slow["warnings"].size() == 1);
  CHECK(slow["warnings"][0].get<std::string>().rfind(
            "fault injection: every training step is delayed by 20% of its own time", 0) == 0);
  // Slower on purpose, the same work: compare judges the config unchanged
  // and the counters equal, and says which side was slowed.
  CHECK(slow["counters"] == base["counters"]);
  r = run_cli("compare " + (root / "base").string() + " " + (root / "slow").string() + " --fail-counters");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("NOTE: other's runs carry fault injection (train.inject_delay 0.2") != std::string::npos);
  CHECK(r.output.find("1 rungs compared, 0 not comparable") != std::string::npos);
  // Refused outside its range, naming the field.
  r = run_cli(run + " --set train.inject_delay=-0.1 --out " + (root / "bad").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("train.inject_delay") != std::string::npos);
}

TEST_CASE("counters: a smaller ddp bucket adds exactly all-reduce calls, and --fail-counters names them") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto root = fresh_dir("counters-ddp");
  const std::string ddp = "run" + smoke(8, 4) +
                          " --set train.warmup_steps=2 --set runtime.devices=2 --set runtime.strategy=ddp";
  auto r = run_cli(ddp + " --out " + (root / "one" / "rung").string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli(ddp + " --set runtime.bucket_mb=0.01 --out " + (root / "many" / "rung").string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto one = result_of(root / "one" / "rung"), many = result_of(root / "many" / "rung");
  // Same step, same ops: the bucket layout changes the collectives only.
  CHECK(one["counters"]["flops_counted"] == many["counters"]["flops_counted"]);
  CHECK(one["comm_per_step"]["bytes"] == many["comm_per_step"]["bytes"]);
  CHECK(one["comm_per_step"]["collectives"].size() < many["comm_per_step"]["collectives"].size());
  // The configs differ in runtime.bucket_mb: compare the counters of the
  // runs as data (the same function --fail-counters uses).
  const auto ca = accel::results::run_counters(accel::train::read_run_record(root / "one" / "rung"));
  const auto cb = accel::results::run_counters(accel::train::read_run_record(root / "many" / "rung"));
  CHECK(ca.at("collective bytes per step") == cb.at("collective bytes per step"));
  CHECK(ca.at("flops counted") == cb.at("flops counted"));
  int changed = 0;
  for (const auto& [k, v] : cb) {
    if (k.rfind("collective all_reduce", 0) == 0 && (!ca.count(k) || ca.at(k) != v)) ++changed;
  }
  CHECK(changed > 0);
  for (const auto& [k, v] : ca) {
    if (k.rfind("op calls", 0) == 0 || k.rfind("flops", 0) == 0) {
      INFO(k);
      CHECK(cb.count(k) == 1);
    }
  }
}

TEST_CASE("counters: bf16-mixed adds the casts of its copies and counts the same large products") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto root = fresh_dir("counters-bf16");
  const std::string run = "run" + smoke(8, 4) + " --set train.warmup_steps=2";
  auto r = run_cli(run + " --out " + (root / "fp32").string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli(run + " --set runtime.precision=bf16-mixed --out " + (root / "bf16").string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto f = result_of(root / "fp32")["counters"], h = result_of(root / "bf16")["counters"];
  auto calls = [](const nlohmann::json& c, const char* op) {
    return c["op_calls_by_op"].contains(op) ? c["op_calls_by_op"][op].get<int64_t>() : 0;
  };
  auto flops = [](const nlohmann::json& c, const char* op) {
    return c["flops_counted_by_op"].contains(op) ? c["flops_counted_by_op"][op].get<double>() : 0.0;
  };
  // The casts of the bf16 copies (weights, activations and their gradients)...
  CHECK(calls(h, "aten::_to_copy") > 10 * std::max<int64_t>(calls(f, "aten::_to_copy"), 1));
  // ... and the same products: the large matmuls and the attention exactly
  // (autocast computes the tiny head's forward product once more as an addmm:
  // 2 x 8 x 96 x 5 FLOPs, which the addmm count shows).
  for (const char* op : {"aten::mm", "accel::fused_attention", "accel::fused_attention_backward"}) {
    INFO(op);
    CHECK(flops(f, op) == flops(h, op));
    CHECK(calls(f, op) == calls(h, op));
  }
  CHECK(h["flops_counted"].get<double>() == doctest::Approx(f["flops_counted"].get<double>()).epsilon(1e-4));
}
