// Exception types carried through the library. Only the CLI turns them into
// messages and exit codes: ConfigError (bad config, bad command line, missing
// or malformed input files) and DataError (a corrupt dataset file) exit 2,
// the "input error" code; everything else (RunError, std::exception) exits 1.
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
// (bad magic, wrong sizes, truncated, a gzip stream cut or failing its CRC).
// The message names the file. Exits 2 like a ConfigError: for the user both
// are "fix your input", not a failed run.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure while running (I/O on outputs, a diverged loss, a worker crash).
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run stopped on request (SIGTERM, SIGINT, SIGUSR1): it finished its step,
// wrote a checkpoint and result.json with status "interrupted". The CLI exits
// with kInterruptedExitCode so a job script can requeue it (`--resume auto`).
class Interrupted : public RunError {
 public:
  using RunError::RunError;
};
constexpr int kInterruptedExitCode = 3;
// `accel-bench compare` under a gate whose verdict is unresolved: no rung
// beyond a bound, but one whose interval straddles it (too few repeats at
// this machine's noise to say). Never 0: an unresolved gate is not green.
constexpr int kUnresolvedExitCode = 4;

}  // namespace accel
