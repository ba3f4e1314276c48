// `accel-bench report DIR`: the report and charts of each result set, as files.
#include "accel/results/charts.h"
#include "accel/machine/peaks.h"
#include "accel/results/report.h"
#include "accel/metrics/metrics.h"
#include "accel/util/errors.h"

namespace fs = std::filesystem;

namespace accel::results {

using machine::PeakTable;
using machine::reference_file;

std::vector<ReportFiles> write_reports(const fs::path& dir, const ReportOptions& opts) {
  const auto sets = find_result_sets(dir);
  if (!opts.out.empty() && sets.size() > 1) {
    throw ConfigError("--out: " + dir.string() + " holds " + std::to_string(sets.size()) +
                      " result sets; report them without --out (each into its own folder)");
  }
  std::vector<ReportFiles> out;
  for (const auto& set_dir : sets) {
    auto set = load_result_set(set_dir);
    if (set.reference.is_null() && !opts.reference.empty()) {
      set.reference = read_json_file(opts.reference);
    }
    fs::path calibration = opts.calibration;
    if (calibration.empty()) {
      calibration = fs::exists(set_dir / "peaks.json")
                        ? set_dir / "peaks.json"
                        : fs::path("results") / "peaks" / (set.machine_id + ".json");
    }
    const auto peaks = opts.calibration.empty()
                           ? PeakTable::load(reference_file(opts.published_peaks), calibration)
                           : PeakTable::load_named(reference_file(opts.published_peaks), calibration, "--calibration");
    auto rep = build_report(set, peaks);
    if (opts.price_per_hour && !opts.prices.empty()) {
      throw ConfigError("report: give --price-per-hour or --prices, not both");
    }
    if (opts.price_per_hour) {
      if (!(*opts.price_per_hour >= 0)) throw ConfigError("--price-per-hour: must be >= 0");
      add_costs(rep, *opts.price_per_hour, "--price-per-hour");
    } else if (!opts.prices.empty()) {
      const auto prices = read_json_file(opts.prices);
      const auto p = num_at(prices, set.machine_id);
      if (!p || *p < 0) {
        throw ConfigError("--prices " + opts.prices.string() + ": no price for machine \"" +
                          set.machine_id + "\" (a number >= 0 under its id)");
      }
      add_costs(rep, *p, opts.prices.string() + " for " + set.machine_id);
    }
    ReportFiles f;
    f.set_dir = set_dir;
    const fs::path target = opts.out.empty() ? set_dir : opts.out;
    fs::create_directories(target);
    f.markdown = report_markdown(rep);
    metrics::write_file_atomic(target / "report.md", f.markdown);
    metrics::write_file_atomic(target / "report.csv", report_csv(rep));
    f.files = {target / "report.md", target / "report.csv"};
    const auto charts = write_charts(rep, target / "charts", opts.gnuplot);
    f.files.insert(f.files.end(), charts.files.begin(), charts.files.end());
    f.notice = charts.notice;
    f.failed = charts.failed;
    if (opts.html) {
      metrics::write_file_atomic(target / "report.html", report_html(rep, charts.files));
      f.files.push_back(target / "report.html");
    }
    // A result.json that exists but does not read (truncated, not JSON) is
    // corruption, not a run still to come: say it beside the report.
    for (const auto& why : rep.unreadable) {
      f.notice += (f.notice.empty() ? "" : "\n") + std::string("report: warning: ") + why +
                  " (the rung shows as unreadable)";
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace accel::results
