// A Markdown table of run results (result.json files): one row per run with
// the figures of the article's tables (time, test accuracy, memory) and the
// throughput a benchmark adds.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace accel::results {

// Throws accel::ConfigError naming a file that is missing or not a result.
std::string summary_table(const std::vector<std::filesystem::path>& result_files);

}  // namespace accel::results
