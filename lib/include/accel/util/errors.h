// Exception types carried through the library. Only the CLI turns them into
// messages and exit codes: ConfigError (bad config, bad command line, missing
// input files) exits 2; everything else (DataError, RunError, std::exception)
// exits 1.
#pragma once

#include <stdexcept>
#include <string>

namespace accel {

// A config, command-line or input-file problem found before any work starts.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An input data file that exists but cannot be read or is malformed
// (bad magic, wrong sizes, truncated). The message names the file.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure while running (I/O on outputs, a diverged loss, a worker crash).
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace accel
