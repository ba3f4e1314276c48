// Starting and joining multi-process jobs: where this process sits (from the
// environment torchrun, Slurm or our own launcher set), and a local launcher
// that starts N ranks of a command, watches them, and stops them all when one
// fails or when the launcher is signalled.
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

namespace accel::dist {

// Where this process sits in a multi-process job, as the environment says.
struct LaunchEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  int node_rank = 0, num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0 = not given
  std::string source;   // "torchrun" | "slurm" | "accel-bench" | "" (no rank in env)
  // accel-bench's local launcher: the private folder its ranks' FileStore
  // lives in (ACCEL_STORE_DIR); "" otherwise.
  std::string store_dir;
  // torchrun's agent hosts a store for its workers (TORCHELASTIC_USE_AGENT_STORE
  // True), at MASTER_ADDR:MASTER_PORT; TORCHELASTIC_RESTART_COUNT names the attempt.
  bool agent_store = false;
  int agent_attempt = 0;
  // ACCEL_STORE_TOKEN: the shared secret of accel-bench's store for
  // multi-node jobs (at least 16 characters); "" = none.
  std::string store_token;
  bool present() const { return !source.empty(); }
};

// torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, GROUP_RANK (node), GROUP_WORLD_SIZE (nodes, optional).
// Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NNODES,
// SLURM_NODELIST (master = its first host unless MASTER_ADDR is set),
// SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE (local world size); the port is
// MASTER_PORT, else derived from SLURM_JOB_ID so that every task agrees on it.
// torchrun variables win over Slurm's (torchrun inside an salloc). Children of
// launch_local carry ACCEL_BENCH_LAUNCHED=1 (source "accel-bench").
// TORCHELASTIC_USE_AGENT_STORE / TORCHELASTIC_RESTART_COUNT (torchrun) and
// ACCEL_STORE_TOKEN (any multi-node job) choose and secure the store.
// Throws accel::ConfigError naming the variable for a malformed or
// inconsistent value ("RANK=x", RANK >= WORLD_SIZE, ...).
LaunchEnv launch_env_from_environment();

// Slurm's hostlist syntax, expanded in order: "node[01-03,07],gpu5" ->
// node01 node02 node03 node07 gpu5 (zero padding kept; several bracket groups
// in one name multiply out). Throws ConfigError on a malformed list.
std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist);

struct LaunchOptions {
  int nprocs = 1;                          // local ranks to start
  std::vector<std::string> argv;           // command each rank runs (argv[0] = program path)
  int node_rank = 0, num_nodes = 1;        // global rank = node_rank * nprocs + local rank
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                     // 0 = pick a free port on master_addr (one node only)
  std::chrono::milliseconds grace{10000};  // after the first failure, how long the others get before SIGKILL
  std::ostream* log = nullptr;             // launcher messages (one line each)
};

struct LaunchOutcome {
  int exit_code = 0;  // 0 when every rank exited 0; else the first failing rank's exit code,
                      // or 128+signal when it was killed by a signal
  int first_failed_rank = -1;
  std::string message;  // e.g. "rank 1 (pid 1234) was killed by signal 9 (SIGKILL); stopped 1 other rank"
  // Added: what the launcher itself went through.
  int interrupted_by = 0;  // first SIGINT/SIGTERM the launcher received (0: none)
  int master_port = 0;     // the port the ranks were given (the picked one when 0 was asked)
};

// Starts nprocs children (fork + exec of argv; a bare name is looked up in
// PATH) with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and ACCEL_BENCH_LAUNCHED=1 set,
// stdin/stdout/stderr inherited, and waits for all of them.
// - The first rank that exits non-zero or is killed: the others get SIGTERM,
//   then SIGKILL after `grace`; the outcome names that rank.
// - SIGINT/SIGTERM/SIGUSR1 received by the launcher are forwarded to every
//   child; after a SIGINT/SIGTERM the children get `grace` to stop, and a
//   second SIGINT/SIGTERM kills them at once.
// - Each child leads its own process group (a Ctrl-C on the terminal reaches
//   the launcher only, which forwards it once); signals go to the whole group,
//   so what a rank started itself stops with it.
// - No orphans: children die with the launcher (PR_SET_PDEATHSIG, SIGKILL) and
//   are all reaped before return. Call it from a thread that outlives the run
//   (it blocks until the end, so the calling thread does).
// Signal handlers are installed only for the duration of the call (one call at
// a time per process). Throws ConfigError for bad options, RunError when a
// child cannot be started (after stopping the ones already started).
LaunchOutcome launch_local(const LaunchOptions& options);

// A TCP port that is free on addr now (bind to port 0, read it back, close).
// Throws ConfigError when addr is not an address of this machine.
int free_tcp_port(const std::string& addr = "127.0.0.1");

// The local address the kernel would use to reach `addr` (no packet is sent).
// For a Gloo device on multi-node runs, where the hostname may not resolve to
// the interface that leads to the master. Throws RunError when there is no route.
std::string local_address_towards(const std::string& addr);

// "SIGKILL" for 9 and so on; "signal N" for unnamed ones.
std::string signal_name(int signo);

}  // namespace accel::dist
