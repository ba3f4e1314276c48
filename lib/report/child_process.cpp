#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "accel/util/errors.h"

extern char** environ;

namespace accel::report::detail {

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

}  // namespace

ChildOutcome run_child(const std::vector<std::string>& argv, const std::filesystem::path& log_file,
                       const std::function<void(const std::string&)>& on_line,
                       const std::filesystem::path& cwd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw RunError(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  PassOnSignals pass_on_signals;
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: the terminal's Ctrl-C comes through us
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw RunError(argv[0] + ": cannot start: " + std::strerror(rc));
  }

  pass_on_signals.set_child(pid);
  std::ofstream log(log_file, std::ios::binary | std::ios::trunc);
  ChildOutcome out;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    log.write(buf, n);
    log.flush();
    pending.append(buf, size_t(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) out.last_line = line;
      on_line(line);
    }
  }
  if (!pending.empty()) {
    out.last_line = pending;
    on_line(pending);
  }
  ::close(fds[0]);
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
  return out;
}

}  // namespace accel::report::detail
