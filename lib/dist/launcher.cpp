// The local launcher: fork + exec N ranks, watch them with waitpid on their
// own pids only (never wait(-1): other code in the process may have children
// of its own), and turn failures and the launcher's own signals into stopping
// every rank within a bounded time.
//
// Signals reach the loop through a self-pipe written by a minimal handler;
// SIGCHLD wakes it as soon as a rank ends, and a short poll tick covers any
// coalesced or lost wake-up.
#include "accel/dist/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "accel/util/errors.h"

extern char** environ;

namespace accel::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kHandled[] = {SIGINT, SIGTERM, SIGUSR1, SIGCHLD};
constexpr std::chrono::milliseconds kTick{100};

std::atomic<int> g_pipe_write{-1};
std::atomic<bool> g_active{false};

extern "C" void on_launcher_signal(int signo) {
  const int saved = errno;
  const int fd = g_pipe_write.load();
  if (fd >= 0) {
    const unsigned char b = static_cast<unsigned char>(signo);
    [[maybe_unused]] auto n = ::write(fd, &b, 1);  // full pipe: a wake-up is pending anyway
  }
  errno = saved;
}

// Handlers, the self-pipe and an unblocked mask for this thread, for the
// duration of one launch; everything restored on scope exit.
class SignalScope {
 public:
  SignalScope() {
    if (g_active.exchange(true)) throw RunError("launch_local: another launch is running in this process");
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
      g_active = false;
      throw RunError(std::string("launch_local: pipe: ") + std::strerror(errno));
    }
    g_pipe_write = fds_[1];
    sigset_t ours;
    sigemptyset(&ours);
    for (int s : kHandled) sigaddset(&ours, s);
    pthread_sigmask(SIG_UNBLOCK, &ours, &old_mask_);
    struct sigaction sa {};
    sa.sa_handler = on_launcher_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < std::size(kHandled); ++i) sigaction(kHandled[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (size_t i = 0; i < std::size(kHandled); ++i) sigaction(kHandled[i], &old_[i], nullptr);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    g_pipe_write = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
    g_active = false;
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  // Waits up to `timeout` for a signal; returns the ones received.
  std::vector<int> wait(std::chrono::milliseconds timeout) {
    pollfd p{fds_[0], POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::max<long long>(0, timeout.count())));  // EINTR: fine
    std::vector<int> got;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof buf)) > 0) got.insert(got.end(), buf, buf + n);
    return got;
  }

 private:
  int fds_[2] = {-1, -1};
  struct sigaction old_[std::size(kHandled)] {};
  sigset_t old_mask_{};
};

struct Child {
  int local_rank = 0, rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

// argv[0] as given when it has a slash, else the first executable in PATH.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t colon = std::min(dirs.find(':', start), dirs.size());
    std::string dir = dirs.substr(start, colon - start);
    const std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = colon + 1;
  }
  throw RunError("launch_local: cannot find " + name + " in PATH");
}

// The parent's environment with the job layout of one rank set over it.
std::vector<std::string> child_environment(const LaunchOptions& o, int local_rank, int port,
                                           const std::string& store_dir) {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(o.node_rank * o.nprocs + local_rank)},
      {"WORLD_SIZE", std::to_string(o.num_nodes * o.nprocs)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nprocs)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(o.num_nodes)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"ACCEL_BENCH_LAUNCHED", "1"},
      {"ACCEL_STORE_DIR", store_dir}};
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (std::none_of(ours.begin(), ours.end(), [&](const auto& p) { return p.first == key; })) {
      out.push_back(kv);
    }
  }
  for (const auto& [k, v] : ours) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// fork + exec; only async-signal-safe calls between the two. Returns the pid,
// or throws RunError with exec's errno (reported through a close-on-exec pipe).
pid_t spawn(const std::string& path, char* const* argv, char* const* envp) {
  int err[2];
  if (::pipe2(err, O_CLOEXEC) != 0) throw RunError(std::string("launch_local: pipe: ") + std::strerror(errno));
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // no handler may run in the child before exec
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : kHandled) sigaction(s, &dfl, nullptr);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(path.c_str(), argv, envp);
    const int e = errno;
    [[maybe_unused]] auto n = ::write(err[1], &e, sizeof e);
    ::_exit(127);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(err[1]);
  if (pid < 0) {
    ::close(err[0]);
    throw RunError(std::string("launch_local: fork: ") + std::strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // also here, so the group exists whichever runs first
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(err[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  ::close(err[0]);
  if (n > 0) {
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    throw RunError("launch_local: cannot run " + path + ": " + std::strerror(exec_errno));
  }
  return pid;
}

// The rank's whole process group, so what it started stops with it.
void signal_child(const Child& c, int signo) {
  if (::kill(-c.pid, signo) != 0) ::kill(c.pid, signo);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_end(const Child& c) {
  std::string s = "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") ";
  if (WIFSIGNALED(c.status)) {
    const int sig = WTERMSIG(c.status);
    return s + "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  }
  return s + "exited with code " + std::to_string(exit_code_of(c.status));
}

std::string ranks(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

// Whether the process is stopped (SIGSTOP, SIGTSTP, a debugger): state T or t
// in /proc/PID/stat. A stopped rank answers no collective; the others time
// out waiting for it, and they are not the ones to blame.
bool is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'T' || state == 't';
}

// The watch over the started ranks, until every one is reaped.
class Watch {
 public:
  Watch(std::vector<Child>& children, const LaunchOptions& o) : c_(children), o_(o) {}

  void run(SignalScope& signals) {
    while (live() > 0) {
      auto timeout = kTick;
      if (has_deadline_) {
        timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(
                                        deadline_ - Clock::now()) + std::chrono::milliseconds(1));
      }
      for (int s : signals.wait(timeout)) on_signal(s);
      reap();
      if (has_deadline_ && Clock::now() >= deadline_ && !killed_) {
        log("grace period over: SIGKILL to " + ranks(live()));
        kill_all(SIGKILL);
        killed_ = true;
      }
    }
  }

  LaunchOutcome outcome() const {
    LaunchOutcome out;
    out.interrupted_by = interrupted_by_;
    std::vector<std::string> parts;
    if (interrupted_by_ != 0) {
      parts.push_back("interrupted by " + signal_name(interrupted_by_) + ", forwarded to " +
                      ranks(forwarded_to_) + (second_signal_ ? ", killed them on a second signal" : ""));
    }
    if (first_failed_ >= 0) {
      const Child& f = c_[first_failed_];
      out.first_failed_rank = f.rank;
      out.exit_code = exit_code_of(f.status);
      std::string s = describe_end(f);
      if (hung_ >= 0) {
        // The rank that stopped answering is the cause; the one that failed
        // first only timed out waiting for it.
        const Child& h = c_[hung_];
        out.first_failed_rank = h.rank;
        s = "rank " + std::to_string(h.rank) + " (pid " + std::to_string(h.pid) +
            ") stopped answering: the process was stopped (SIGSTOP, or a debugger), so " + s +
            " waiting for it; SIGKILL to the stopped rank";
      }
      if (stopped_ > 0) s += "; stopped " + std::to_string(stopped_) + (stopped_ == 1 ? " other rank" : " other ranks");
      parts.push_back(s);
    } else if (interrupted_by_ == 0) {
      parts.push_back("all " + ranks(static_cast<int>(c_.size())) + " exited 0");
    }
    for (size_t i = 0; i < parts.size(); ++i) out.message += (i ? "; " : "") + parts[i];
    return out;
  }

 private:
  int live() const {
    return static_cast<int>(std::count_if(c_.begin(), c_.end(), [](const Child& c) { return c.running; }));
  }

  void kill_all(int signo) {
    for (const auto& c : c_) {
      if (c.running) signal_child(c, signo);
    }
  }

  void start_grace() {
    const auto d = Clock::now() + o_.grace;
    if (!has_deadline_ || d < deadline_) deadline_ = d;
    has_deadline_ = true;
  }

  void on_signal(int s) {
    if (s == SIGCHLD) return;
    if (s == SIGUSR1) {
      log("got SIGUSR1, forwarding it to " + ranks(live()));
      kill_all(s);
      return;
    }
    if (interrupted_by_ == 0) {
      interrupted_by_ = s;
      forwarded_to_ = live();
      log("got " + signal_name(s) + ", forwarding it to " + ranks(forwarded_to_));
      kill_all(s);
      start_grace();
    } else if (!second_signal_) {
      second_signal_ = true;
      log("got " + signal_name(s) + " again: SIGKILL to " + ranks(live()));
      kill_all(SIGKILL);
      killed_ = true;
    }
  }

  void reap() {
    for (size_t i = 0; i < c_.size(); ++i) {
      Child& c = c_[i];
      if (!c.running) continue;
      int st = 0;
      pid_t r;
      do {
        r = ::waitpid(c.pid, &st, WNOHANG);
      } while (r < 0 && errno == EINTR);
      if (r == 0) continue;
      c.running = false;
      // ECHILD: reaped by other code in this process; the status is lost.
      c.status = r == c.pid ? st : (1 << 8);
      ::kill(-c.pid, SIGKILL);  // whatever the rank left behind in its group
      if (exit_code_of(c.status) != 0 && first_failed_ < 0) on_first_failure(static_cast<int>(i));
    }
  }

  void on_first_failure(int index) {
    first_failed_ = index;
    // A stopped rank cannot take SIGTERM (it is queued until SIGCONT): it is
    // killed now instead of after the grace period, and named as the cause.
    for (size_t i = 0; i < c_.size(); ++i) {
      if (c_[i].running && is_stopped(c_[i].pid)) {
        if (hung_ < 0) hung_ = static_cast<int>(i);
        log("rank " + std::to_string(c_[i].rank) + " (pid " + std::to_string(c_[i].pid) +
            ") is stopped and answers no collective: SIGKILL");
        signal_child(c_[i], SIGKILL);
      }
    }
    stopped_ = live();
    log(describe_end(c_[index]) + (stopped_ > 0 ? "; SIGTERM to the other " + ranks(stopped_) : ""));
    if (stopped_ > 0) {
      kill_all(SIGTERM);
      start_grace();
    }
  }

  void log(const std::string& line) const {
    if (o_.log) *o_.log << "launcher: " << line << std::endl;
  }

  std::vector<Child>& c_;
  const LaunchOptions& o_;
  Clock::time_point deadline_{};  // SIGKILL to all that are left, once set
  bool has_deadline_ = false, killed_ = false, second_signal_ = false;
  int first_failed_ = -1, stopped_ = 0, interrupted_by_ = 0, forwarded_to_ = 0;
  int hung_ = -1;  // a rank found stopped when another failed
};

void check_options(const LaunchOptions& o) {
  if (o.nprocs < 1) throw ConfigError("launch: nprocs must be at least 1, got " + std::to_string(o.nprocs));
  if (o.argv.empty() || o.argv[0].empty()) throw ConfigError("launch: no command to run");
  if (o.num_nodes < 1) throw ConfigError("launch: num_nodes must be at least 1");
  if (o.node_rank < 0 || o.node_rank >= o.num_nodes) {
    throw ConfigError("launch: node_rank " + std::to_string(o.node_rank) + " outside 0.." +
                      std::to_string(o.num_nodes - 1));
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    throw ConfigError("launch: master_port " + std::to_string(o.master_port) + " is not a TCP port");
  }
  if (o.master_port == 0 && o.num_nodes > 1) {
    throw ConfigError("launch: a master port must be given when num_nodes > 1 (every node must use the same)");
  }
  if (o.grace.count() < 0) throw ConfigError("launch: grace must not be negative");
}

}  // namespace

std::string signal_name(int signo) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (const auto& [n, name] : kNames) {
    if (n == signo) return name;
  }
  return "signal " + std::to_string(signo);
}

// A fresh folder only this user can enter (mkdtemp: mode 0700) for the
// ranks' FileStore, removed with what is in it when the launch ends.
class PrivateDir {
 public:
  PrivateDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/accel-store-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      throw RunError("launch: cannot create a private folder for the ranks' store under " +
                     templ.substr(0, templ.rfind('/')) + ": " + std::strerror(errno));
    }
    path_ = templ;
  }
  ~PrivateDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

LaunchOutcome launch_local(const LaunchOptions& options) {
  check_options(options);
  const int port = options.master_port != 0 ? options.master_port : free_tcp_port(options.master_addr);
  // One node: the ranks meet in a FileStore in a private folder, so nothing
  // of the rendezvous listens on the network (rank 0's TCPStore would listen
  // on every interface, without authentication). Several nodes need TCP.
  std::optional<PrivateDir> store;
  if (options.num_nodes == 1) store.emplace();
  const std::string store_dir = store ? store->path() : std::string();
  const std::string path = resolve_program(options.argv[0]);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv = c_strings(args);

  SignalScope signals;
  std::vector<Child> children;
  try {
    for (int lr = 0; lr < options.nprocs; ++lr) {
      auto env = child_environment(options, lr, port, store_dir);
      auto envp = c_strings(env);
      Child c;
      c.local_rank = lr;
      c.rank = options.node_rank * options.nprocs + lr;
      c.pid = spawn(path, argv.data(), envp.data());
      c.running = true;
      children.push_back(c);
    }
  } catch (...) {
    for (auto& c : children) {
      signal_child(c, SIGKILL);
      int st;
      while (::waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {
      }
    }
    throw;
  }
  if (options.log) {
    std::string pids;
    for (const auto& c : children) pids += (pids.empty() ? "" : ",") + std::to_string(c.pid);
    *options.log << "launcher: started " << ranks(options.nprocs) << " (pids " << pids << "), world "
                 << options.num_nodes * options.nprocs;
    if (store) {
      *options.log << ", store in " << store_dir << " (this user only; nothing listens beyond "
                   << options.master_addr << ")";
    } else {
      *options.log << ", master " << options.master_addr << ":" << port;
    }
    *options.log << std::endl;
  }
  Watch watch(children, options);
  watch.run(signals);
  LaunchOutcome out = watch.outcome();
  out.master_port = port;
  return out;
}

}  // namespace accel::dist
