#include "accel/results/summary.h"

#include <string>
#include <vector>
#include <fstream>

#include "accel/util/json.h"

#include "accel/results/report.h"
#include "accel/results/result_set.h"
#include "accel/util/errors.h"
#include "accel/util/json_doc.h"

namespace accel::results {


std::string summary_table(const std::vector<std::filesystem::path>& files) {
  std::string out =
      "| run | status | loop | precision | epochs | train time | test acc | samples/s (step) | "
      "step ms (median) | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& file : files) {
    nlohmann::json doc = read_json_file(file);
    if (!doc.is_object() || !doc.contains("schema_version") || !doc.contains("config")) {
      throw ConfigError(file.string() + ": not an accel-bench result.json");
    }
    // As read_run_record reads it: every text cleaned but the config's
    // (cleaned where it is shown below).
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (it.key() != "config") clean_strings(it.value());
    }
    const RunRecord r = train::run_record_of(doc, file.parent_path());
    if (r.ok()) {
      if (const auto why = train::impossible_figure(r, doc); !why.empty()) throw ConfigError(file.string() + ": " + why);
    }
    auto text = [](const nlohmann::json& cfg, const char* section, const char* key, const char* fallback) {
      return clean_text(str_at(cfg, std::string(section) + "/" + key, fallback), 200);
    };
    // Cells joined, not printed into a fixed buffer: a long name never cuts the row.
    const std::vector<std::string> cells = {
        markdown_text(r.name), markdown_text(r.status), markdown_text(text(r.config, "train", "loop", "plain")),
        markdown_text(text(r.config, "runtime", "precision", "?")), std::to_string(r.epochs_done),
        fmt_num(r.train_time_s ? OptNum(*r.train_time_s / 60.0) : OptNum(), "%.2f min"),
        // A metric that is not a share (a loss) says its name in the cell.
        r.metric.proportion ? fmt_pct(r.test_acc) : r.metric.name + " " + fmt_metric(r.metric, r.test_acc),
        fmt_num(r.samples_per_s, "%.1f"), fmt_num(r.step_ms_median, "%.1f"),
        fmt_gb(r.peak_memory_bytes.empty() ? OptNum() : OptNum(r.peak_memory_bytes.front()))};
    for (const auto& c : cells) out += "| " + c + " ";
    out += "|\n";
  }
  return out;
}

}  // namespace accel::results
