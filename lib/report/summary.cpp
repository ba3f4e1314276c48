#include "accel/report/summary.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "accel/report/result_set.h"
#include "accel/util/errors.h"

namespace accel::report {

std::string summary_table(const std::vector<std::filesystem::path>& files) {
  std::string out =
      "| run | status | loop | precision | epochs | train time | test acc | samples/s (step) | "
      "step ms (median) | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& file : files) {
    const nlohmann::json r = read_json_file(file);
    if (!r.contains("schema_version") || !r.contains("config")) {
      throw ConfigError(file.string() + ": not an accel-bench result.json");
    }
    auto num = [&](const char* key) {
      auto it = r.find(key);
      return it != r.end() && it->is_number() ? it->get<double>() : 0.0;
    };
    // samples_per_s from schema 3 on, images_per_s before it.
    const double samples = r.contains("samples_per_s") ? num("samples_per_s") : num("images_per_s");
    const auto peak = r.value("peak_memory_bytes", nlohmann::json::array({0}));
    char row[512];
    std::snprintf(row, sizeof(row), "| %s | %s | %s | %s | %zu | %.2f min | %.2f%% | %.1f | %.1f | %.2f GB |\n",
                  r.value("name", file.parent_path().filename().string()).c_str(),
                  r.value("status", "?").c_str(), r["config"]["train"].value("loop", "plain").c_str(),
                  r["config"]["runtime"].value("precision", "?").c_str(),
                  r.value("epochs", nlohmann::json::array()).size(), num("train_time_s") / 60.0,
                  num("test_acc") * 100.0, samples,
                  r.contains("step_time_ms") ? r["step_time_ms"].value("median", 0.0) : 0.0,
                  (peak.empty() ? 0.0 : peak[0].get<double>()) / 1e9);
    out += row;
  }
  return out;
}

}  // namespace accel::report
