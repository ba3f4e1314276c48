// Reading a rank's place in the job from the environment torchrun, Slurm or
// our own launcher left, and Slurm's hostlist syntax.
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "accel/dist/launcher.h"
#include "accel/util/errors.h"

namespace accel::dist {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& why) {
  throw ConfigError("environment " + name + "=" + value + ": " + why);
}

// A whole, non-negative decimal integer (no sign, no spaces, no suffix).
int parse_count(const std::string& name, const std::string& value) {
  if (value.empty() || value.size() > 9) bad(name, value, "not a non-negative integer");
  int v = 0;
  for (char c : value) {
    if (c < '0' || c > '9') bad(name, value, "not a non-negative integer");
    v = v * 10 + (c - '0');
  }
  return v;
}

std::optional<int> env_count(const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  return parse_count(name, *v);
}

int require_count(const char* name, const char* because) {
  auto v = env_count(name);
  if (!v) throw ConfigError(std::string("environment: ") + because + " but " + name + " is not set");
  return *v;
}

void check_below(const char* name, int value, const char* limit_name, int limit) {
  if (value >= limit) {
    bad(name, std::to_string(value),
        std::string("must be below ") + limit_name + "=" + std::to_string(limit));
  }
}

void check_positive(const char* name, int value) {
  if (value < 1) bad(name, std::to_string(value), "must be at least 1");
}

int parse_port(const char* name, const std::string& value) {
  const int port = parse_count(name, value);
  if (port < 1 || port > 65535) bad(name, value, "not a TCP port (1-65535)");
  return port;
}

void check_layout(LaunchEnv& e, const char* rank, const char* world, const char* local_rank,
                  const char* local_world, const char* node, const char* nodes) {
  check_positive(world, e.world_size);
  check_below(rank, e.rank, world, e.world_size);
  check_positive(local_world, e.local_world_size);
  check_below(local_rank, e.local_rank, local_world, e.local_world_size);
  if (e.local_world_size > e.world_size) {
    bad(local_world, std::to_string(e.local_world_size),
        std::string("larger than ") + world + "=" + std::to_string(e.world_size));
  }
  check_positive(nodes, e.num_nodes);
  check_below(node, e.node_rank, nodes, e.num_nodes);
}

LaunchEnv from_torchrun() {
  LaunchEnv e;
  e.source = env("ACCEL_BENCH_LAUNCHED").value_or("") == "1" ? "accel-bench" : "torchrun";
  if (e.source == "accel-bench") e.store_dir = env("ACCEL_STORE_DIR").value_or("");
  e.rank = require_count("RANK", "RANK is set");
  e.world_size = require_count("WORLD_SIZE", "RANK is set");
  check_positive("WORLD_SIZE", e.world_size);  // before LOCAL_WORLD_SIZE takes it as its default
  e.local_world_size = env_count("LOCAL_WORLD_SIZE").value_or(e.world_size);
  check_positive("LOCAL_WORLD_SIZE", e.local_world_size);  // before dividing by it
  e.local_rank = env_count("LOCAL_RANK").value_or(e.rank % e.local_world_size);
  e.node_rank = env_count("GROUP_RANK").value_or(e.rank / e.local_world_size);
  e.num_nodes = env_count("GROUP_WORLD_SIZE")
                    .value_or((e.world_size + e.local_world_size - 1) / e.local_world_size);
  check_layout(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "GROUP_WORLD_SIZE");
  if (auto a = env("MASTER_ADDR")) {
    if (a->empty()) bad("MASTER_ADDR", *a, "empty");
    e.master_addr = *a;
  }
  if (auto p = env("MASTER_PORT")) e.master_port = parse_port("MASTER_PORT", *p);
  if (auto a = env("TORCHELASTIC_USE_AGENT_STORE"); a && e.source == "torchrun") {
    // torch.distributed reads it as Python's bool("True").
    e.agent_store = *a == "True" || *a == "true" || *a == "1";
    if (e.agent_store) e.agent_attempt = env_count("TORCHELASTIC_RESTART_COUNT").value_or(0);
  }
  return e;
}

// SLURM_TASKS_PER_NODE looks like "4(x2),3": the first node's count comes first.
int slurm_tasks_per_node(int ntasks, int nnodes) {
  if (auto v = env("SLURM_NTASKS_PER_NODE")) return parse_count("SLURM_NTASKS_PER_NODE", *v);
  if (auto v = env("SLURM_TASKS_PER_NODE")) {
    const auto end = v->find_first_of("(,");
    return parse_count("SLURM_TASKS_PER_NODE", v->substr(0, end));
  }
  return (ntasks + nnodes - 1) / nnodes;
}

LaunchEnv from_slurm() {
  LaunchEnv e;
  e.source = "slurm";
  e.rank = require_count("SLURM_PROCID", "SLURM_PROCID is set");
  // Older Slurm names the task count SLURM_NPROCS.
  e.world_size = require_count(env("SLURM_NTASKS") || !env("SLURM_NPROCS") ? "SLURM_NTASKS"
                                                                           : "SLURM_NPROCS",
                               "SLURM_PROCID is set");
  e.num_nodes = env_count("SLURM_NNODES").value_or(1);
  check_positive("SLURM_NNODES", e.num_nodes);
  e.local_world_size = slurm_tasks_per_node(e.world_size, e.num_nodes);
  e.local_rank = env_count("SLURM_LOCALID").value_or(0);
  e.node_rank = env_count("SLURM_NODEID").value_or(0);
  check_layout(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
               "SLURM_NODEID", "SLURM_NNODES");
  if (auto a = env("MASTER_ADDR"); a && !a->empty()) {
    e.master_addr = *a;
  } else if (auto list = env("SLURM_NODELIST") ? env("SLURM_NODELIST") : env("SLURM_JOB_NODELIST")) {
    const auto hosts = expand_slurm_nodelist(*list);
    if (hosts.empty()) bad("SLURM_NODELIST", *list, "names no host");
    e.master_addr = hosts.front();
  }
  if (auto p = env("MASTER_PORT")) {
    e.master_port = parse_port("MASTER_PORT", *p);
  } else if (auto job = env("SLURM_JOB_ID")) {
    // Every task of the job must agree on a port without talking: derive it
    // from the job id, in a range clear of the usual ephemeral ports' start.
    e.master_port = 15000 + static_cast<int>(std::strtoull(job->c_str(), nullptr, 10) % 10000);
  }
  return e;
}

// Splits at commas outside brackets.
std::vector<std::string> split_top_level(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) bad("SLURM_NODELIST", list, "unbalanced brackets");
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) bad("SLURM_NODELIST", list, "unbalanced brackets");
  out.push_back(cur);
  return out;
}

// "01-03,07" -> 01 02 03 07, keeping the lower bound's width.
std::vector<std::string> expand_ranges(const std::string& inner, const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= inner.size()) {
    const size_t comma = std::min(inner.find(',', start), inner.size());
    const std::string part = inner.substr(start, comma - start);
    const size_t dash = part.find('-');
    const std::string lo_s = part.substr(0, dash);
    const std::string hi_s = dash == std::string::npos ? lo_s : part.substr(dash + 1);
    if (lo_s.empty() || hi_s.empty() || lo_s.size() > 9 || hi_s.size() > 9 ||
        lo_s.find_first_not_of("0123456789") != std::string::npos ||
        hi_s.find_first_not_of("0123456789") != std::string::npos) {
      bad("SLURM_NODELIST", list, "bad range \"" + part + "\"");
    }
    const long lo = std::stol(lo_s), hi = std::stol(hi_s);
    if (hi < lo || hi - lo > 100000) bad("SLURM_NODELIST", list, "bad range \"" + part + "\"");
    for (long i = lo; i <= hi; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < lo_s.size()) n.insert(0, lo_s.size() - n.size(), '0');
      out.push_back(n);
    }
    start = comma + 1;
  }
  return out;
}

// One host pattern, possibly with several bracket groups ("r[1-2]n[1-2]").
void expand_host(const std::string& pattern, const std::string& list, std::vector<std::string>& out) {
  const size_t open = pattern.find('[');
  if (open == std::string::npos) {
    if (pattern.find(']') != std::string::npos) bad("SLURM_NODELIST", list, "unbalanced brackets");
    out.push_back(pattern);
    return;
  }
  const size_t close = pattern.find(']', open);
  const std::string head = pattern.substr(0, open);
  const std::string tail = pattern.substr(close + 1);
  for (const auto& n : expand_ranges(pattern.substr(open + 1, close - open - 1), list)) {
    expand_host(head + n + tail, list, out);
  }
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist) {
  std::vector<std::string> hosts;
  if (nodelist.empty()) return hosts;
  for (const auto& item : split_top_level(nodelist)) {
    if (item.empty()) bad("SLURM_NODELIST", nodelist, "empty host name");
    expand_host(item, nodelist, hosts);
  }
  return hosts;
}

LaunchEnv launch_env_from_environment() {
  LaunchEnv e;
  if (env("RANK")) {
    e = from_torchrun();
  } else if (env("SLURM_PROCID")) {
    e = from_slurm();
  } else {
    return e;
  }
  if (auto t = env("ACCEL_STORE_TOKEN")) {
    // A guessable secret proves nothing; say so instead of trusting it.
    if (t->size() < 16) {
      throw ConfigError("environment ACCEL_STORE_TOKEN: " + std::to_string(t->size()) +
                        " characters; a shared secret needs at least 16 (e.g. `openssl rand -hex "
                        "16`, the same on every node)");
    }
    e.store_token = *t;
  }
  return e;
}

}  // namespace accel::dist
