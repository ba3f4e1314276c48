// Bar charts like the article's: training time per rung and test accuracy
// per rung, this machine's bar beside the article's, values on the bars.
// Written as data (runtime.csv, accuracy.csv) and drawn by gnuplot (Debian's
// gnuplot-nox) as SVG and PNG; without gnuplot only the CSVs are written and
// a one-line notice says so.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "accel/results/report.h"

namespace accel::results {

// One chart's data: header "rung,ours,ours_low,ours_high,article" (values in
// the unit `unit` returns; empty fields are n/a), one row per rung in order.
struct ChartData {
  std::string name;    // "runtime" | "accuracy" | "speedup" | "scaling"
  std::string title, ylabel;
  std::string csv;
  // "bars": the layout above; "lines": header "devices,<series>..." with a
  // predicted series (lines) and a measured one (points) per strategy.
  std::string kind = "bars";
};
std::vector<ChartData> chart_data(const Report& r);

struct ChartOutput {
  std::vector<std::filesystem::path> files;  // written
  std::string notice;                        // "" when the images were drawn
  // Charts gnuplot did not write whole ("runtime.svg and runtime.png"): the
  // previous files of that name are left as they were.
  std::vector<std::string> failed;
};

// A string from data as a gnuplot script must hold it: single-quoted, '' for
// a quote, control characters as spaces (never run, never a new command).
std::string gnuplot_string(const std::string& s);

// Writes DIR/<name>.csv, .gp and, with gnuplot, .svg and .png. `gnuplot` is
// a program name looked up on PATH or a path.
ChartOutput write_charts(const Report& r, const std::filesystem::path& dir,
                         const std::string& gnuplot = "gnuplot");

// A line chart of one trend (csv: "set,<series>..." with the set's index in
// the first column), drawn as the report's charts are.
ChartOutput write_trend_chart(const ChartData& c, const std::string& subtitle, const std::filesystem::path& dir,
                              const std::string& gnuplot = "gnuplot");

// The gnuplot script of a bar chart (ChartData's "bars" layout): our bars
// with their interval (columns 3 and 4) as error bars and values above, the
// article's beside when `article_title` is not empty; SVG and PNG outputs.
std::string gnuplot_script(const ChartData& c, const std::string& subtitle, const std::string& article_title);

// The gnuplot program's full path, or "" when absent.
std::string find_program(const std::string& name);

}  // namespace accel::results
