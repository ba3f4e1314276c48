// Runs a child process with its stdout and stderr on one pipe, handing each
// output line to a callback and copying all of it to a log file; and the
// progress channel between a sweep and the `accel-bench run` it starts: JSON
// lines the run writes on a pipe of their own (fd kProgressFd in the child,
// named by the environment variable kProgressFdEnv), so the sweep reads
// structured events instead of parsing console text.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace accel::util {

struct ChildOutcome {
  int exit_code = -1;     // the child's exit status, or 128 + signal
  std::string last_line;  // the last non-empty output line (an error, usually)
  int stop_signal = 0;    // the first SIGINT/SIGTERM/SIGUSR1 passed on to the child (0: none)
  bool timed_out = false; // it outran timeout_s and was stopped
};

// argv[0] is the program path. The child runs in a process group of its own,
// so a Ctrl-C at the terminal reaches it once, through this process: while
// it runs, SIGINT, SIGTERM and SIGUSR1 to this process are passed on to it
// (a run checkpoints and exits 3; a second signal stops it at once) and
// recorded in stop_signal. Throws accel::RunError when the child cannot be
// started.
// `cwd`: the folder the child starts in (empty: this process's).
// `on_event`: when set, the child gets the progress channel (fd kProgressFd,
// kProgressFdEnv in its environment) and each line it writes there is handed
// to on_event, as its output lines are to on_line.
// `timeout_s` > 0: a child still running after that many seconds gets
// SIGTERM in its process group (its ranks too), and SIGKILL 10 s later;
// timed_out is then set and last_line says so.
// The longest timeout_s: 30 days (2,592,000 s), far beyond any run and far
// inside a steady clock's range. Outside [0, kMaxTimeoutS] (NaN included)
// run_child throws accel::RunError before starting anything.
inline constexpr double kMaxTimeoutS = 30.0 * 24 * 3600;

ChildOutcome run_child(const std::vector<std::string>& argv, const std::filesystem::path& log_file,
                       const std::function<void(const std::string&)>& on_line,
                       const std::filesystem::path& cwd = {},
                       const std::function<void(const std::string&)>& on_event = {},
                       double timeout_s = 0);

inline constexpr const char* kProgressFdEnv = "ACCEL_PROGRESS_FD";
inline constexpr int kProgressFd = 3;

// The progress channel this process was given: the descriptor named by
// kProgressFdEnv when it is a decimal number of an open pipe, else -1 (no
// channel: unset, malformed, closed, or not a pipe, so a stray value never
// makes a run write into some other file).
int progress_channel_from_env();

// Writes one event line (a compact JSON object, at most PIPE_BUF bytes with
// its newline, so concurrent writers never interleave) to the channel; a
// failed write (the reader gone) is ignored: progress is never worth failing
// a run for.
void send_progress(int fd, const std::string& json_line);

}  // namespace accel::util
