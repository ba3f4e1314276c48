// A results history in SQLite: every run of every result set added (machine
// id, suite, rung, repeat, the comparable config's hash, accel-bench and
// LibTorch versions, git sha, date, each measure -- the test accuracy of a
// classifier, the test loss of a language model -- and the exact counters), so
// a rung's trend can be shown and a new set judged against the last N sets of
// the same machine, rung and config, as PyTorch's dashboard does: a
// regression only after two consecutive violating sets, "suspicious" after one.
//
// The file: WAL journal and a busy timeout, so two CI jobs adding at once
// both land; a schema version in its meta table, migrated forward on open; a
// file that is not SQLite, or SQLite that is not an accel-bench history, or a
// history of a newer schema is a ConfigError naming it and is never
// overwritten. A file of an older schema is migrated by an add and read as
// it is by show, export and compare --history (a column it lacks is empty).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <ostream>
#include <vector>

#include "accel/results/compare.h"
#include "accel/results/result_set.h"

namespace accel::results {

inline constexpr int kHistorySchemaVersion = 3;
inline constexpr const char* kDefaultHistoryFile = "results/history.sqlite";

// One run as the history holds it.
struct HistoryRun {
  std::string run_key;  // FNV-1a of the run's result.json: adding it twice is a no-op
  std::string set_id;   // the set it came with (its folder name and manifest's suite/machine)
  std::string machine_id, suite, rung;
  int repeat = 1;
  std::string config_hash;  // of comparable_config(config): where a run happens does not split a trend
  std::string accel_bench_version, libtorch_version, git_sha;
  std::string finished_at;  // the run's end (UTC, ISO 8601), else when it was added
  std::string status;
  OptNum train_time_s, step_ms, samples_per_s, test_acc, peak_memory_bytes;
  // A language model's test loss (a metric that is not a share, lower
  // better); test_acc holds a share only.
  OptNum test_loss;
  Json counters;  // result.json's counters (null when none)
};

// The measures a history holds, by the names `--measure` takes.
const std::vector<std::string>& history_measures();
OptNum history_measure(const HistoryRun& run, const std::string& measure);

class History {
 public:
  // read_write: opens (creating when absent) the history at `file`, in WAL
  // mode, migrating an older schema; nothing is changed in a file until it
  // is known to be an accel-bench history. read_only (show, export, compare
  // --history): the file must exist and is never written, so a read-only
  // mount or another user's 0444 file reads too. ConfigError when it cannot
  // be read as an accel-bench history (the file is left as it is).
  enum class Mode { read_write, read_only };
  explicit History(const std::filesystem::path& file, Mode mode = Mode::read_write);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Adds every ok or failed run of a set (one transaction); returns how many
  // were new. A run whose result.json was refused as read (impossible
  // figures, not JSON) refuses the whole add: ConfigError with its reason,
  // nothing written.
  int add_set(const ResultSet& set);
  // Adds runs as `export` wrote them (JSON lines); returns how many were new.
  int add_lines(const std::string& jsonl, const std::string& source);
  // `history add`, whole: each input a folder (every result set under it) or
  // an export (.jsonl), a line each on `log` (paths cleaned for a terminal),
  // then the total. Returns the runs added; ConfigError for no input, or a
  // folder that holds no result set.
  int add_inputs(const std::vector<std::string>& inputs, std::ostream& log);

  struct Filter {
    std::string machine, rung, config_hash;
  };
  // Runs in date order (then by key).
  std::vector<HistoryRun> runs(const Filter& f = {}) const;
  // One JSON object per line, every field; `add_lines` reads it back.
  std::string export_lines() const;
  int schema_version() const;

 private:
  struct Db;
  std::unique_ptr<Db> db_;
  std::string file_;
};

// The rows `history show` prints: per set (in date order) the median of its
// runs' measure, for one machine/rung/config (all when empty).
struct TrendPoint {
  std::string set_id, machine_id, rung, config_hash, finished_at, git_sha;
  int runs = 0;
  double value = 0;
};
std::vector<TrendPoint> history_trend(const std::vector<HistoryRun>& runs, const std::string& measure);
std::string trend_text(const std::vector<TrendPoint>& points, const std::string& measure);
// A line chart of the trend per rung (gnuplot, SVG and PNG as the report's);
// the files written.
std::vector<std::filesystem::path> trend_charts(const std::vector<TrendPoint>& points, const std::string& measure,
                                                const std::filesystem::path& dir);

// `compare --history`: OTHER's rungs against the median of the last `window`
// sets of the same machine, rung and config before it in the history.
// A measure beyond its bound (training and step time: --fail-slower PCT;
// peak memory: --fail-memory-growth PCT; test accuracy: --fail-accuracy-drop
// POINTS; test loss: --fail-loss-rise DELTA; a measure without a bound is not
// judged) is a violation; a
// violation whose previous set also violated its own window is a regression,
// a lone one suspicious.
struct HistoryVerdict {
  std::string rung, measure, verdict;  // "ok" | "suspicious" | "regression" | "no history"
  OptNum value, baseline;
  int window_sets = 0;
};
struct HistoryOutcome {
  std::vector<HistoryVerdict> verdicts;
  int regressions = 0, suspicious = 0;
  std::string markdown;
};
HistoryOutcome judge_against_history(const std::vector<HistoryRun>& history, const ResultSet& other, int window,
                                     const CompareBounds& bounds);

}  // namespace accel::results
