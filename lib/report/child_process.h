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
};

// argv[0] is the program path. Throws accel::RunError when the child cannot
// be started.
ChildOutcome run_child(const std::vector<std::string>& argv, const std::filesystem::path& log_file,
                       const std::function<void(const std::string&)>& on_line);

}  // namespace accel::report::detail
