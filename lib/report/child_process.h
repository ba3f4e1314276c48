// Runs a child process with its stdout and stderr on one pipe, handing each
// output line to a callback and copying all of it to a log file. Private to
// lib/report (the sweep's runs).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace accel::report::detail {

struct ChildOutcome {
  int exit_code = -1;     // the child's exit status, or 128 + signal
  std::string last_line;  // the last non-empty output line (an error, usually)
  int stop_signal = 0;    // the first SIGINT/SIGTERM/SIGUSR1 passed on to the child (0: none)
};

// argv[0] is the program path. The child runs in a process group of its own,
// so a Ctrl-C at the terminal reaches it once, through this process: while
// it runs, SIGINT, SIGTERM and SIGUSR1 to this process are passed on to it
// (a run checkpoints and exits 3; a second signal stops it at once) and
// recorded in stop_signal. Throws accel::RunError when the child cannot be
// started.
// `cwd`: the folder the child starts in (empty: this process's).
ChildOutcome run_child(const std::vector<std::string>& argv, const std::filesystem::path& log_file,
                       const std::function<void(const std::string&)>& on_line,
                       const std::filesystem::path& cwd = {});

}  // namespace accel::report::detail
