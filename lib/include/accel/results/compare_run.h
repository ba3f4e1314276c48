// `accel-bench compare`, whole: the sets read, each OTHER compared with BASE
// under the bounds (with the machine's noise: --noise FILE, else BASE's
// calibration where both sets are one machine's), and the last set judged
// against a history's window. The CLI prints the outcome in the format asked
// and exits with compare_exit_status. Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accel/results/compare.h"
#include "accel/results/history.h"

namespace accel::results {

struct CompareRequest {
  std::vector<std::string> sets;  // BASE, then one or more OTHER
  CompareBounds bounds;
  std::string noise_file;         // --noise FILE ("": BASE's calibration, where both sets are its machine's)
  std::string history_db;         // --history FILE ("": none)
  int window = 5;                 // --window
};

struct CompareRun {
  std::vector<CompareOutcome> outcomes;   // one per OTHER
  std::optional<HistoryOutcome> history;  // the last set against the history's window
  const HistoryOutcome* history_or_null() const { return history ? &*history : nullptr; }
};

// ConfigError (exit 2) naming the flag or file for what cannot be compared:
// fewer than two sets, a bound not finite and >= 0, a noise file without
// "noise", a missing history, a window below 1.
CompareRun run_compare(const CompareRequest& request);

// The noise block a compare of BASE and OTHER uses: --noise FILE's (its
// "noise"), else BASE's machine calibration where both sets are that
// machine's and it holds one; null otherwise.
Json compare_noise(const std::string& noise_file, const ResultSet& base, const ResultSet& other);

}  // namespace accel::results
