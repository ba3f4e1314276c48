// Compare result sets (machines, GPU models, commits) rung by rung: time
// ratio, accuracy delta, memory ratio, each set's hardware and versions.
// Only like with like: rungs whose resolved configs differ are "not
// comparable", except for the fields that describe where a run happens
// rather than what it computes (comparable_config).
#pragma once

#include <optional>
#include <utility>
#include <string>

#include "accel/results/result_set.h"

namespace accel::results {

struct CompareBounds {
  std::optional<double> slower_pct;         // --fail-slower PCT: time ratio > 1 + PCT/100
  std::optional<double> acc_drop_points;    // --fail-accuracy-drop POINTS (percentage points)
  std::optional<double> memory_growth_pct;  // --fail-memory-growth PCT (largest rank)
  std::optional<double> acc_band_points;    // --accuracy-band POINTS: |delta| beyond it fails
  bool require_same_config = false;         // a "not comparable" rung fails
  // With any bound above, a rung of BASE that could not be judged against it
  // (configs differ, a side lacks the measure a bound needs, BASE's run
  // failed) fails the comparison: a gate that compared nothing must not pass.
  // --allow-uncompared lets such rungs through, said in the summary.
  bool allow_uncompared = false;
  bool gates() const {
    return slower_pct || acc_drop_points || memory_growth_pct || acc_band_points ||
           require_same_config;
  }
};

// The resolved config without the machine-defining runtime facts and
// locations: runtime.threads and runtime.accelerator (what the machine has),
// model.init_path and data.root (where its files are), name and description.
// Everything else -- devices, strategy, precision, batch, epochs, seed, data
// -- defines the experiment and must match.
Json comparable_config(const Json& config);
// Two runs' configs as compared: both resolved again by today's schema
// (fields added since a run was made take their defaults, so older result
// sets stay comparable), or both as written when either no longer
// resolves; then comparable_config.
std::pair<Json, Json> comparable_configs(const Json& a, const Json& b);

// The paths where two configs differ ("train.epochs: 10 vs 3"), at most `limit`.
std::string config_difference(const Json& a, const Json& b, size_t limit = 3);

struct CompareOutcome {
  std::string markdown;
  int regressions = 0;      // rungs beyond a bound, failed or missing where base was ok,
                            // or not judged under a gate (CompareBounds::allow_uncompared)
  int not_comparable = 0;
  int compared = 0;
  int uncompared = 0;       // rungs of BASE not judged: not comparable, no measure, no ok run
  std::string summary;      // the verdict line, also the markdown's first and last line
};

CompareOutcome compare_sets(const ResultSet& base, const ResultSet& other,
                            const CompareBounds& bounds);

}  // namespace accel::results
