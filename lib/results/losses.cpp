#include "accel/results/losses.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "accel/util/errors.h"
#include "accel/util/input_file.h"

namespace accel::results {


namespace {

std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();  // getline drops a last empty cell
  return cells;
}

std::string quoted(const std::string& cell) {
  return "\"" + (cell.size() > 40 ? cell.substr(0, 40) + "..." : cell) + "\"";
}

// Whole-cell numbers only: std::stod("0.12x") would read 0.12.
bool parse_int(const std::string& s, int64_t& v) {
  try {
    size_t used = 0;
    v = std::stoll(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

bool parse_loss(const std::string& s, double& v) {
  if (s.empty()) {  // the run logs a non-finite loss as an empty cell
    v = NAN;
    return true;
  }
  try {
    size_t used = 0;
    v = std::stod(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

LossTrace read_loss_trace(const std::filesystem::path& file_or_dir) {
  auto file = file_or_dir;
  if (std::filesystem::is_directory(file)) file /= "metrics.csv";
  std::string text;
  try {
    text = read_input_file(file, "");
  } catch (const DataError& e) {
    throw ConfigError(e.what());
  }
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  if (line.rfind("kind,step,epoch,loss", 0) != 0) {
    throw ConfigError(file.string() + ": not an accel-bench metrics.csv (header: " +
                      line.substr(0, 80) + ")");
  }
  const size_t columns = split_cells(line).size();
  LossTrace t;
  int64_t row = 1;
  while (std::getline(in, line)) {
    ++row;
    const std::string at = file.string() + ": line " + std::to_string(row) + ": ";
    // Every row the run writes ends with a newline: a last line without one
    // was cut off mid-write, and its last number may be cut too.
    if (in.eof()) throw ConfigError(at + "incomplete row (no newline at the end of the file)");
    if (line.rfind("step,", 0) != 0) continue;
    const auto cells = split_cells(line);
    if (cells.size() != columns)
      throw ConfigError(at + "step row has " + std::to_string(cells.size()) + " cells, the header " +
                        std::to_string(columns));
    int64_t step = 0;
    double loss = 0;
    if (!parse_int(cells[1], step)) throw ConfigError(at + "bad step number " + quoted(cells[1]));
    if (!parse_loss(cells[3], loss)) throw ConfigError(at + "bad loss " + quoted(cells[3]));
    t.steps.push_back(step);
    t.losses.push_back(loss);
  }
  if (in.bad()) throw ConfigError(file.string() + ": read error");
  return t;
}

LossDiff compare_losses(const LossTrace& a, const LossTrace& b) {
  LossDiff d;
  d.same_steps = a.steps == b.steps;
  const size_t n = std::min(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < n; ++i) {
    const double diff = std::fabs(a.losses[i] - b.losses[i]);
    if (!(diff <= d.max_abs)) {  // NaN counts as worst
      d.max_abs = std::isnan(diff) ? INFINITY : diff;
      d.worst_step = a.steps[i];
    }
  }
  d.compared = int64_t(n);
  return d;
}

std::string LossDiff::summary() const {
  const char* steps_note = same_steps ? "" : " (the runs logged different steps)";
  char buf[200];
  if (compared == 0) {
    std::snprintf(buf, sizeof(buf), "no steps compared%s", steps_note);
  } else if (worst_step < 0) {  // no step differs (only then is there no worst one)
    std::snprintf(buf, sizeof(buf), "%lld steps compared; identical losses%s",
                  static_cast<long long>(compared), steps_note);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld steps compared; max |loss difference| %.3g at step %lld%s",
                  static_cast<long long>(compared), max_abs, static_cast<long long>(worst_step),
                  steps_note);
  }
  return buf;
}

}  // namespace accel::results
