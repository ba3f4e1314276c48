// Step-by-step comparison of two runs' loss traces (metrics.csv), e.g. the
// same config on LibTorch 1.13 and 2.6, or on two machines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace accel::results {

struct LossTrace {
  std::vector<int64_t> steps;
  std::vector<double> losses;
};

// Reads the "step" rows of a metrics.csv (or of DIR/metrics.csv); an empty
// loss cell (a non-finite loss) reads as NaN. Throws accel::ConfigError
// naming the file (and the line) when it is missing or malformed: a row with
// another cell count than the header, a cell that is not wholly a number, or
// a last line without its newline (a write cut off, maybe mid-number).
LossTrace read_loss_trace(const std::filesystem::path& file_or_dir);

struct LossDiff {
  int64_t compared = 0;
  double max_abs = 0;
  int64_t worst_step = -1;  // the first step with the largest difference; -1 if none differs
  bool same_steps = true;  // both traces log the same step numbers
  std::string summary() const;
};

LossDiff compare_losses(const LossTrace& a, const LossTrace& b);

}  // namespace accel::results
