#include "accel/results/summary.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "accel/results/report.h"
#include "accel/results/result_set.h"
#include "accel/util/errors.h"

namespace accel::results {


std::string summary_table(const std::vector<std::filesystem::path>& files) {
  std::string out =
      "| run | status | loop | precision | epochs | train time | test acc | samples/s (step) | "
      "step ms (median) | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& file : files) {
    const nlohmann::json doc = read_json_file(file);
    if (!doc.is_object() || !doc.contains("schema_version") || !doc.contains("config")) {
      throw ConfigError(file.string() + ": not an accel-bench result.json");
    }
    const RunRecord r = train::run_record_of(doc, file.parent_path());
    auto text = [](const nlohmann::json& cfg, const char* section, const char* key, const char* fallback) {
      return str_at(cfg, std::string(section) + "/" + key, fallback);
    };
    char row[512];
    std::snprintf(row, sizeof(row), "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s |\n",
                  r.name.c_str(), r.status.c_str(), text(r.config, "train", "loop", "plain").c_str(),
                  text(r.config, "runtime", "precision", "?").c_str(), r.epochs_done,
                  fmt_num(r.train_time_s ? OptNum(*r.train_time_s / 60.0) : OptNum(), "%.2f min").c_str(),
                  fmt_pct(r.test_acc).c_str(), fmt_num(r.samples_per_s, "%.1f").c_str(),
                  fmt_num(r.step_ms_median, "%.1f").c_str(),
                  fmt_gb(r.peak_memory_bytes.empty() ? OptNum() : OptNum(r.peak_memory_bytes.front())).c_str());
    out += row;
  }
  return out;
}

}  // namespace accel::results
