#include "accel/report/losses.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "accel/util/errors.h"

namespace accel::report {

LossTrace read_loss_trace(const std::filesystem::path& file_or_dir) {
  auto file = file_or_dir;
  if (std::filesystem::is_directory(file)) file /= "metrics.csv";
  std::ifstream in(file);
  if (!in) throw ConfigError(file.string() + ": cannot open");
  std::string line;
  std::getline(in, line);
  if (line.rfind("kind,step,epoch,loss", 0) != 0) {
    throw ConfigError(file.string() + ": not an accel-bench metrics.csv (header: " + line + ")");
  }
  LossTrace t;
  int64_t row = 1;
  while (std::getline(in, line)) {
    ++row;
    if (line.rfind("step,", 0) != 0) continue;
    std::stringstream ss(line);
    std::string kind, step, epoch, loss;
    std::getline(ss, kind, ',');
    std::getline(ss, step, ',');
    std::getline(ss, epoch, ',');
    std::getline(ss, loss, ',');
    try {
      t.steps.push_back(std::stoll(step));
      t.losses.push_back(std::stod(loss));
    } catch (const std::exception&) {
      throw ConfigError(file.string() + ": line " + std::to_string(row) + ": bad step row");
    }
  }
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
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%lld steps compared; max |loss difference| %.3g at step %lld%s",
                static_cast<long long>(compared), max_abs, static_cast<long long>(worst_step),
                same_steps ? "" : " (the runs logged different steps)");
  return buf;
}

}  // namespace accel::report
