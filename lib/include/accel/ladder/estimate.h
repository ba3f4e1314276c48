// About how long a suite's runs take on this machine, before they run: each
// rung's planned work (train/work.h: forward passes of one sample, a trained
// sample counted as three) against what the same rung took in a committed
// result set of the suite (its sweep.json's wall time), scaled by the two
// machines' measured matmul rates (`accel-bench calibrate`) at the threads
// each ran with: fp32's, or an emulated precision's own (slower) rate, which
// is what makes it slow (estimate.cpp, priced_peak). Then, as rungs finish,
// the rest is rescaled by how far off the finished ones came (EtaTracker).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "accel/machine/peaks.h"
#include "accel/results/result_set.h"
#include "accel/train/work.h"

namespace accel::ladder {

// What a rung will run with on this machine, as the estimate needs it.
struct RunShape {
  std::string rung;       // the rung's id in the suite (and in the committed sets)
  train::PlannedWork work;
  std::string precision;  // runtime.precision as it will run
  int threads = 1;        // per rank
  bool emulated = false;  // this CPU emulates the precision
};

// One run's estimated time: fixed (process start, data and model set-up)
// plus a cost per forward unit (PlannedWork::forward_units).
struct Estimate {
  double fixed_s = 0, per_unit_s = 0;
  double seconds(const train::PlannedWork& w) const { return fixed_s + per_unit_s * w.forward_units(); }
  double train_s(const train::PlannedWork& w) const {
    return per_unit_s * 3.0 * double(w.train_samples);
  }
};

class Estimator {
 public:
  // `results`: the suite's committed result sets (a folder of machine sets;
  // empty or missing: none). `calibration`: this machine's peaks.json (empty:
  // none). `machine_id`: this machine's, whose own committed set is
  // preferred (then no peaks are needed for the precisions it ran).
  Estimator(const std::filesystem::path& results, const std::filesystem::path& calibration,
            const std::string& machine_id);

  // One run of the rung (its process: set-up, training, evaluations), from
  // this machine's committed set where it holds the rung, else from the
  // newest calibrated one that does; nullopt when none (or no peak) says.
  // `from`: the set it came from.
  std::optional<Estimate> estimate(const RunShape& run, std::string* from = nullptr) const;
  std::optional<double> seconds(const RunShape& run) const {
    const auto e = estimate(run);
    return e ? std::optional<double>(e->seconds(run.work)) : std::nullopt;
  }
  // Where the figures come from, one line ("" when nothing to scale from).
  const std::string& basis() const { return basis_; }

 private:
  struct Reference {
    results::ResultSet set;
    machine::PeakTable peaks;
    bool same_machine = false;
  };
  std::optional<Estimate> from(const Reference& ref, const RunShape& run) const;
  std::vector<Reference> refs_;  // in the order they are asked
  machine::PeakTable here_;
  std::string basis_;
};

// The ETA of a sweep: the rungs' estimates, rescaled by how the finished
// ones came out (separately for emulated precisions, which the peaks price
// less well).
class EtaTracker {
 public:
  // A run the sweep will make, in order (estimate may be unknown).
  void plan(const std::string& label, std::optional<double> estimate_s, bool emulated);
  // It finished after `seconds`; nullopt: it ended without saying how fast
  // this machine is (failed, reused, interrupted).
  void done(const std::string& label, std::optional<double> seconds);
  // The planned runs not yet done, their seconds rescaled; and how many of
  // them have no estimate.
  double remaining_s() const;
  int unknown_remaining() const;
  int total() const { return int(runs_.size()); }
  int finished() const;
  // "3 of 9 runs done in 4m10s; about 6m left" (or "... ; 2 runs not estimated").
  std::string line(double elapsed_s) const;

 private:
  struct Run {
    std::string label;
    std::optional<double> estimate;
    bool emulated = false, done = false, measured = false;
    double actual = 0;
  };
  double factor(bool emulated) const;
  std::vector<Run> runs_;
};

// A time budget for a whole sweep: the fraction of its training batches
// every run keeps (train.limit_train_batches) so that the estimated total
// fits, set-up and evaluation unchanged; 1 when it fits already or exceeds
// it by less than the estimate's error (kBudgetSlack), never below `floor`.
// A run without an estimate counts nothing (it is scaled alike).
inline constexpr double kBudgetSlack = 1.10;
struct RunCost {
  double fixed_s = 0, train_s = 0, eval_s = 0;
  bool scalable = true;  // false: its steps are capped already (train.max_steps)
};
double budget_fraction(const std::vector<RunCost>& runs, double budget_s, double floor);

// "1h05m", "4m10s", "35s".
std::string duration_text(double seconds);

}  // namespace accel::ladder
