#include "accel/util/child_process.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "accel/util/errors.h"

extern char** environ;

namespace accel::util {

namespace {

std::atomic<pid_t> g_child{0};
std::atomic<int> g_stop{0};

extern "C" void pass_on(int sig) {
  int none = 0;
  g_stop.compare_exchange_strong(none, sig);
  const pid_t child = g_child.load();
  if (child > 0) ::kill(child, sig);
}

// Passes SIGINT/SIGTERM/SIGUSR1 on to the child while it lives; the previous
// handlers come back at scope exit.
class PassOnSignals {
 public:
  PassOnSignals() {
    g_stop = 0;
    g_child = 0;
    struct sigaction sa {};
    sa.sa_handler = pass_on;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  // A signal that came before the child existed is passed on now.
  void set_child(pid_t child) {
    g_child = child;
    if (const int sig = g_stop.load(); sig != 0) ::kill(child, sig);
  }
  ~PassOnSignals() {
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_child = 0;
  }
  PassOnSignals(const PassOnSignals&) = delete;
  PassOnSignals& operator=(const PassOnSignals&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGUSR1};
  struct sigaction old_[3];
};

// Splits what arrives on a pipe into lines for a callback.
struct LineSplitter {
  std::string pending;
  // Appends; calls f for each complete line (a trailing '\r' dropped).
  template <class F>
  void feed(const char* data, size_t n, F&& f) {
    pending.append(data, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      f(line);
    }
  }
};

// The child's environment: ours, with kProgressFdEnv set to kProgressFd
// when the channel is on and removed when it is off.
std::vector<std::string> child_environment(bool channel) {
  std::vector<std::string> env;
  const std::string key = std::string(kProgressFdEnv) + "=";
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, key.c_str(), key.size()) != 0) env.emplace_back(*e);
  }
  if (channel) env.push_back(key + std::to_string(kProgressFd));
  return env;
}

}  // namespace

ChildOutcome run_child(const std::vector<std::string>& argv, const std::filesystem::path& log_file,
                       const std::function<void(const std::string&)>& on_line,
                       const std::filesystem::path& cwd,
                       const std::function<void(const std::string&)>& on_event,
                       double timeout_s) {
  if (!(timeout_s >= 0 && timeout_s <= kMaxTimeoutS)) {
    throw RunError("a child's time limit must be 0 (none) or at most " + std::to_string(int64_t(kMaxTimeoutS)) +
                   " s, not " + std::to_string(timeout_s));
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw RunError(std::string("pipe: ") + std::strerror(errno));
  int ev[2] = {-1, -1};
  if (on_event) {
    if (::pipe2(ev, O_CLOEXEC) != 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw RunError(std::string("pipe: ") + std::strerror(errno));
    }
    // dup2 onto the same number would keep its close-on-exec flag.
    if (ev[1] <= kProgressFd) {
      const int moved = ::fcntl(ev[1], F_DUPFD_CLOEXEC, 10);
      ::close(ev[1]);
      ev[1] = moved;
    }
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  if (ev[1] >= 0) posix_spawn_file_actions_adddup2(&actions, ev[1], kProgressFd);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  auto env = child_environment(ev[1] >= 0);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  PassOnSignals pass_on_signals;
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: the terminal's Ctrl-C comes through us
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (ev[1] >= 0) ::close(ev[1]);
  if (rc != 0) {
    ::close(fds[0]);
    if (ev[0] >= 0) ::close(ev[0]);
    throw RunError(argv[0] + ": cannot start: " + std::strerror(rc));
  }

  pass_on_signals.set_child(pid);
  std::ofstream log(log_file, std::ios::binary | std::ios::trunc);
  ChildOutcome out;
  LineSplitter output, events;
  auto output_line = [&](const std::string& line) {
    if (!line.empty()) out.last_line = line;
    on_line(line);
  };
  auto event_line = [&](const std::string& line) {
    if (!line.empty()) on_event(line);
  };
  // Both pipes until both end: the run's ranks may hold the channel a little
  // longer than its output, or the other way round.
  pollfd pfd[2] = {{fds[0], POLLIN, 0}, {ev[0], POLLIN, 0}};
  char buf[4096];
  // timeout_s: SIGTERM to the child's process group at the deadline (a run
  // checkpoints and exits), SIGKILL kKillAfter later if its output is still open.
  using Clock = std::chrono::steady_clock;
  constexpr auto kKillAfter = std::chrono::seconds(10);
  const bool limited = timeout_s > 0;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(limited ? timeout_s : 0.0));
  int signals_sent = 0;
  while (pfd[0].fd >= 0 || pfd[1].fd >= 0) {
    int wait_ms = -1;
    if (limited && signals_sent < 2) {
      const auto now = Clock::now();
      if (now >= deadline) {
        ::kill(-pid, signals_sent == 0 ? SIGTERM : SIGKILL);
        out.timed_out = true;
        ++signals_sent;
        deadline = now + kKillAfter;
        continue;
      }
      // At most a minute a poll: a far deadline's milliseconds would not fit an int.
      const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      wait_ms = int(std::min<int64_t>(left_ms, 60'000)) + 1;
    }
    const int ready = ::poll(pfd, 2, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ready == 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (pfd[i].fd < 0 || pfd[i].revents == 0) continue;
      const ssize_t n = ::read(pfd[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(pfd[i].fd);
        pfd[i].fd = -1;
        continue;
      }
      if (i == 0) {
        log.write(buf, n);
        log.flush();
        output.feed(buf, size_t(n), output_line);
      } else {
        events.feed(buf, size_t(n), event_line);
      }
    }
  }
  if (!output.pending.empty()) output_line(output.pending);
  if (!events.pending.empty()) event_line(events.pending);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.stop_signal = g_stop.load();
  if (WIFEXITED(status)) {
    out.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.exit_code = 128 + WTERMSIG(status);
    out.last_line = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                    strsignal(WTERMSIG(status)) + ")";
  }
  if (out.timed_out) {
    char took[32];
    std::snprintf(took, sizeof(took), "%g", timeout_s);
    out.last_line = std::string("timed out after ") + took + " s (" +
                    (out.exit_code >= 128 ? "killed" : "stopped, exit " + std::to_string(out.exit_code)) +
                    ")";
  }
  return out;
}

int progress_channel_from_env() {
  const char* v = std::getenv(kProgressFdEnv);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long fd = std::strtol(v, &end, 10);
  if (*end != '\0' || fd < 0 || fd > INT_MAX) return -1;
  struct stat st {};
  if (::fstat(int(fd), &st) != 0 || !S_ISFIFO(st.st_mode)) return -1;
  return int(fd);
}

void send_progress(int fd, const std::string& json_line) {
  if (fd < 0) return;
  const std::string line = json_line + "\n";
  if (line.size() > PIPE_BUF) return;  // would not be one atomic write
  ssize_t n;
  do {
    n = ::write(fd, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
}

}  // namespace accel::util
