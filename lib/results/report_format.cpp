// Markdown and CSV renderings of a Report (build_report in report.cpp).
#include <algorithm>
#include <functional>
#include <cstdio>
#include <sstream>

#include "accel/results/report.h"
#include "accel/util/json_doc.h"

namespace accel::results {

namespace {

std::string with_range(const Stat& s, const std::string& median_text,
                       const std::function<std::string(OptNum)>& fmt) {
  if (s.n < 2) return median_text;
  auto strip = [](std::string t) {  // "5.10 min" / "70.00%" -> "5.10" / "70.00" inside the range
    const auto sp = t.find_first_of(" %");
    return sp == std::string::npos ? t : t.substr(0, sp);
  };
  return median_text + " (" + strip(fmt(s.min)) + "-" + strip(fmt(s.max)) + ")";
}

// One unit for the whole table, as the article: minutes once any rung takes
// two minutes or more, else seconds.
std::string time_cell(const Stat& s, bool minutes) {
  if (!s.median) return "n/a";
  auto f = minutes ? +[](OptNum v) { return fmt_num(v ? OptNum(*v / 60) : v, "%.2f min"); }
                     : +[](OptNum v) { return fmt_num(v, "%.1f s"); };
  return with_range(s, f(s.median), f);
}

bool any_minutes(const Report& r) {
  for (const auto* rows : {&r.upstream, &r.rungs}) {
    for (const auto& row : *rows) {
      if (row.time_s.median && *row.time_s.median >= 120) return true;
    }
  }
  return false;
}

// A rung's test metric; where the set holds more than one metric (`named`),
// one that is not a share says its name ("loss 6.3087").
std::string acc_cell(const Stat& s, const train::MetricFacts& metric, bool named = false) {
  const std::string cell = with_range(s, fmt_metric(metric, s.median), [&](OptNum v) { return fmt_metric(metric, v); });
  return named && !metric.proportion && s.median ? metric.name + " " + cell : cell;
}

std::string mem_cell(const std::vector<double>& per_rank) {
  if (per_rank.empty()) return "n/a";
  std::string out;
  for (const double b : per_rank) out += (out.empty() ? "" : " / ") + fmt_num(b / 1e9, "%.2f");
  return out + " GB";
}

std::string speedup(OptNum v) { return fmt_num(v, "%.2fx"); }

// A measured speedup: the point, its 95% interval and its verdict.
std::string speedup(OptNum v, const std::optional<RungRow::SpeedupInterval>& iv) {
  if (!v) return "n/a";
  if (!iv) return speedup(v);
  return fmt_num(v, "%.2fx") + " [" + fmt_num(iv->iv.low, "%.2f") + ", " + fmt_num(iv->iv.high, "%.2f") + "] " +
         iv->verdict;
}

std::string ttt_cell(const RungRow& r, bool minutes) {
  if (r.ok_runs == 0) return "n/a";
  if (r.ttt_reached == 0) return "not reached";
  std::string s = time_cell(r.ttt_s, minutes);
  if (r.ttt_reached < r.ok_runs) {
    s += " (" + std::to_string(r.ttt_reached) + "/" + std::to_string(r.ok_runs) + " reached)";
  }
  return s;
}

}  // namespace

// Text from a result set (ids, what a rung changes, notes with errors and CPU
// names) as one Markdown table cell or line: a newline would end the row and
// raw HTML would be markup, so control characters become spaces, '|' is
// escaped and '<', which opens every tag, is "&lt;" (an entity renders as
// text, so '&' and '>' may stay as written); '[', ']' and '!' are escaped
// so that no link or image ([x](javascript:...), ![t](http://...)) is ever
// made of a set's text.
std::string markdown_text(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += ' ';
    } else if (c == '|' || c == '[' || c == ']' || c == '!') {
      out += '\\';
      out += c;
    } else if (c == '<') {
      out += "&lt;";
    } else {
      out += c;
    }
  }
  return out;
}

// A text cell of report.csv: quoted where it must be (RFC 4180), and never a
// live spreadsheet formula: a cell starting with = + - @ (or a tab or CR)
// gets a leading ' as the OWASP CSV-injection guidance says.
std::string csv_text(const std::string& s) {
  std::string v = s;
  if (!v.empty() && std::string("=+-@\t\r").find(v.front()) != std::string::npos) v = "'" + v;
  if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
  std::string out = "\"";
  for (const char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

namespace {

std::string escape_md(const std::string& s) { return markdown_text(s); }
std::string csv_field(const std::string& s) { return csv_text(s); }

}  // namespace

std::string csv_num(OptNum v) { return v ? fmt_num(v, "%.6g") : ""; }

std::string target_markdown(const ResultSet& set, const std::vector<TargetScore>& scores) {
  if (scores.empty()) return "";
  std::ostringstream md;
  // The section only where some rung has the runs to be scored: with fewer
  // than 3 a rung, every row would read n/a. One line says so instead.
  const bool scorable = std::any_of(scores.begin(), scores.end(), [](const TargetScore& s) { return s.runs >= 3; });
  if (!scorable) {
    int reached = 0, runs = 0;
    for (const auto& s : scores) reached += s.reached, runs += s.runs;
    md << "\nTime to " << fmt_metric(set.metric, set.target_accuracy) << " validation " << set.metric.name << ": " << reached << " of " << runs
       << " runs reached it (the main table's time to target); no MLPerf score, which needs 3 or more runs a rung "
          "(`sweep --runs 5 --to-target`).\n";
    return md.str();
  }
  const std::string ref = set.convergence_reference;
  md << "\n## Time to target, MLPerf-scored\n\nTo " << fmt_metric(set.metric, set.target_accuracy)
     << " validation " << set.metric.name << " (test " << set.metric.name << " never stops a run), over each rung's ok runs as MLPerf "
        "Training scores them: the fastest and the slowest dropped and the rest averaged; a run that "
        "missed the target counts as the slowest, two misses invalidate the rung, and fewer than 3 "
        "runs give no score (`sweep --runs 5 --to-target`). Time is training with its validations up "
        "to the one that reached the target.";
  if (!ref.empty()) {
    md << " Convergence: each rung's samples to the target against " << escape_md(ref)
       << "'s, by MLPerf's one-sided two-sample t-test at p = 0.05 with the reference's spread: "
          "\"faster\" converges faster than the reference allows (a suspect evaluation), \"slower\" "
          "significantly slower (a change that learned differently, which MLPerf accepts and this "
          "report names), the validation grid's rounding added to the reference's variance; the time "
          "normalised as MLPerf normalises (x the reference's samples over the rung's, never below 1).";
  }
  md << "\n\n| rung | runs | reached | time to target | 95% interval | samples to target"
     << (ref.empty() ? "" : " | convergence vs " + escape_md(ref) + " | samples allowed | normalised time")
     << " | article time | article " << set.metric.short_name() << " |\n|---|---|---|---|---|---" << (ref.empty() ? "" : "|---|---|---")
     << "|---|---|\n";
  for (const auto& s : scores) {
    md << "| " << escape_md(s.id) << " | " << s.runs << " | " << s.reached << " | ";
    if (s.time_s.valid) {
      md << fmt_time(s.time_s.mean) << " | "
         << (s.time_s.ci_low ? fmt_time(*s.time_s.ci_low) + " - " + fmt_time(*s.time_s.ci_high) : "-") << " | ";
    } else {
      md << "n/a: " << escape_md(s.time_s.why) << " | - | ";
    }
    md << (s.samples.valid ? fmt_num(s.samples.mean, "%.0f") : "n/a");
    if (!ref.empty()) {
      if (s.convergence) {
        const auto& c = *s.convergence;
        md << " | " << (s.id == ref ? "reference" : c.verdict) << " | " << fmt_num(c.min_mean, "%.0f") << " - "
           << fmt_num(c.max_mean, "%.0f") << " | " << fmt_time(s.normalised_time_s);
      } else {
        md << " | n/a | - | -";
      }
    }
    md << " | " << fmt_num(s.ref_time_min, "%.2f min") << " | " << fmt_num(s.ref_acc_pct, "%.2f%%") << " |\n";
  }
  return md.str();
}

std::string report_markdown(const Report& r) {
  const bool minutes = any_minutes(r);
  std::ostringstream md;
  const auto& set = r.set;
  md << "# " << escape_md(set.suite.empty() ? "results" : set.suite) << " on "
     << escape_md(set.machine_id) << "\n\n";
  const std::string target =
      set.target_accuracy ? "time to " + fmt_metric(set.metric, set.target_accuracy) + " val" : "time to target";
  // One metric: its column name; several (the smoke suite's accuracy and
  // loss rungs): "test metric", each cell its own.
  const std::string test_col = r.mixed_metrics ? std::string("test metric") : "test " + set.metric.short_name();
  const std::string article_metric = r.mixed_metrics ? std::string("acc") : set.metric.short_name();
  // Text sets count samples (texts) and tokens; image sets, images as the article.
  bool text = false;
  for (const auto& row : r.rungs) text = text || row.tokens_total.median.has_value();
  const std::string per = text ? "samples/s" : "img/s";
  const std::string base = r.speedup_base.empty() ? "first pretrained" : r.speedup_base;
  // The story first: what each rung changed and what it bought, with the
  // speedup's interval and verdict and the article's between the same rungs.
  const bool steady = r.speed_measure == kSpeedSteadyStep;
  // "article", or what the reference calls its figures ("published": one per technique).
  const std::string label =
      set.reference.is_object() ? escape_md(clean_text(str_at(set.reference, "label", "article"), 40)) : "article";
  // Memory beside the published memory figures, where the reference has any.
  const bool mem_ratios = std::any_of(r.rungs.begin(), r.rungs.end(),
                                      [](const RungRow& row) { return row.ref_mem_ratio_prev.has_value(); });
  md << "| rung | what changed | " << (steady ? "step per sample (ms)" : "train time") << " | vs prev | vs scratch | "
     << label << " vs prev | " << test_col << " | peak mem/rank | "
     << (mem_ratios ? "less mem vs prev | " + label + " less mem vs prev | " : "") << "status |\n"
     << "|---|---|---|---|---|---|---|---|" << (mem_ratios ? "---|---|" : "") << "---|\n";
  // "vs prev" against a rung the suite names (its "versus") says which.
  const auto vs_prev = [](const RungRow& row) {
    std::string cell = speedup(row.speedup_prev, row.speedup_prev_iv);
    if (!row.versus.empty() && row.prev_id == row.versus) cell += " (vs " + escape_md(row.versus) + ")";
    return cell;
  };
  for (const auto& row : r.rungs) {
    std::string when = time_cell(row.time_s, minutes);
    if (steady) when = row.speed ? fmt_num(*row.speed * 1000, "%.4g") : "n/a";  // what the speedups divide
    md << "| " << escape_md(row.id) << " | " << escape_md(row.changes) << " | " << when << " | "
       << vs_prev(row) << " | " << speedup(row.speedup_scratch, row.speedup_scratch_iv)
       << " | " << speedup(row.ref_speedup_prev) << " | " << acc_cell(row.acc, row.metric, r.mixed_metrics) << " | " << mem_cell(row.mem_per_rank)
       << " | ";
    if (mem_ratios) md << speedup(row.mem_ratio_prev) << " | " << speedup(row.ref_mem_ratio_prev) << " | ";
    md << escape_md(row.status) << " |\n";
  }
  md << "\n" << kEveryColumn << "\n\n";
  md << "| rung | article | what changed | devices x threads | precision | strategy | epochs "
        "| train time | vs scratch | vs prev | vs " << base << " | " << test_col << " | peak mem/rank | "
     << per << "/device | " << per << " total | " << (text ? "tokens/s | " : "") << "MFU | "
     << target
     << " | status | article time | article vs scratch | article vs prev | article vs its " << base
     << " | article " << article_metric << " | article mem |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" << (text ? "---|" : "")
     << "---|---|---|---|---|---|---|---|---|\n";
  for (const auto& row : r.rungs) {
    md << "| " << escape_md(row.id) << " | " << (row.article.empty() ? "-" : escape_md(row.article))
       << " | " << escape_md(row.changes) << " | "
       << (row.devices_threads.empty() ? "-" : escape_md(row.devices_threads)) << " | "
       << (row.precision.empty() ? "-" : escape_md(row.precision)) << " | "
       << (row.strategy.empty() ? "-" : escape_md(row.strategy)) << " | " << fmt_num(row.epochs, "%.0f")
       << " | " << time_cell(row.time_s, minutes) << " | " << speedup(row.speedup_scratch, row.speedup_scratch_iv)
       << " | " << vs_prev(row) << " | "
       << speedup(row.speedup_base, row.speedup_base_iv) << " | "
       << acc_cell(row.acc, row.metric, r.mixed_metrics) << " | "
       << mem_cell(row.mem_per_rank) << " | " << fmt_num(row.ips_device.median, "%.1f") << " | "
       << fmt_num(row.ips_total.median, "%.1f") << " | "
       << (text ? fmt_num(row.tokens_total.median, "%.0f") + " | " : "")
       << (row.mfu.median ? fmt_num(*row.mfu.median * 100, "%.1f%%") : "n/a") << " | "
       << (set.target_accuracy && row.metric == set.metric ? ttt_cell(row, minutes) : "-") << " | "
       << escape_md(row.status) << " | "
       << fmt_num(row.ref_time_min, "%.2f min") << " | " << speedup(row.ref_speedup_scratch)
       << " | " << speedup(row.ref_speedup_prev) << " | " << speedup(row.ref_speedup_base) << " | "
       << fmt_num(row.ref_acc_pct, "%.2f%%") << " | "
       << fmt_num(row.ref_mem_gb, "%.2f GB") << " |\n";
  }
  // Energy, where a device's counter measured it (NVML on a GPU); a set
  // without any says nothing here (a CPU run records "not measured").
  if (std::any_of(r.rungs.begin(), r.rungs.end(), [](const RungRow& row) { return row.energy_j_per_step.n > 0; })) {
    md << "\nEnergy of the timed steps (the steps after warm-up; validations and checkpoint writes left out), "
          "all devices of a run together, median over the ok runs:\n\n"
       << "| rung | measured by | J per step | J per sample | J to the target |\n|---|---|---|---|---|\n";
    for (const auto& row : r.rungs) {
      md << "| " << escape_md(row.id) << " | "
         << (row.energy_j_per_step.n > 0 ? escape_md(clean_text(row.energy_source, 20)) : "not measured") << " | "
         << fmt_num(row.energy_j_per_step.median, "%.4g") << " | " << fmt_num(row.energy_j_per_sample.median, "%.4g")
         << " | " << fmt_num(row.energy_to_target_j.median, "%.4g") << " |\n";
    }
  }
  if (!r.upstream.empty()) {
    md << "\nUpstream runs (their time is reported apart, as the article does not count "
          "pretraining):\n\n"
       << "| run | what it is | devices x threads | precision | epochs | train time | " << test_col
       << " | peak mem/rank | status |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& row : r.upstream) {
      md << "| " << escape_md(row.id) << " | " << escape_md(row.changes) << " | "
         << (row.devices_threads.empty() ? "-" : escape_md(row.devices_threads)) << " | "
         << (row.precision.empty() ? "-" : escape_md(row.precision)) << " | "
         << fmt_num(row.epochs, "%.0f") << " | " << time_cell(row.time_s, minutes) << " | "
         << acc_cell(row.acc, row.metric, r.mixed_metrics) << " | " << mem_cell(row.mem_per_rank) << " | "
         << escape_md(row.status) << " |\n";
    }
  }
  md << "\n";
  for (const auto& n : r.notes) md << "- " << escape_md(n) << "\n";
  if (r.noise.is_object() && r.noise.contains("machine") && r.noise["machine"].is_object()) {
    md << "\n## This machine's noise\n\nFrom " << escape_md(str_at(r.noise, "set"))
       << " (unchanged repeats, `accel-bench calibrate --noise`): the smallest change a compare resolves "
          "on this machine (95% interval, power 0.8), by runs a side.\n\n"
       << "| measure | repeats measured | 1 run | 3 runs | 5 runs |\n|---|---|---|---|---|\n";
    for (const auto& [measure, m] : r.noise["machine"].items()) {
      // The task's metric: a share in points, another (a loss) in its own units.
      const bool metric = measure.rfind("test ", 0) == 0;
      bool share = r.set.metric.proportion;  // the rungs' metric of that name (a set may hold several)
      for (const auto& row : r.rungs) {
        if (metric_measure(row.metric) == measure) share = row.metric.proportion;
      }
      const char* own = share ? "%.2f points" : "%.4f";
      md << "| " << escape_md(measure) << " | " << fmt_num(num_at(m, "runs"), "%.0f");
      for (const char* n : {"resolves_with_1", "resolves_with_3", "resolves_with_5"}) {
        const auto v = num_at(m, n);
        md << " | " << (metric ? fmt_num(v, own) : fmt_num(v ? OptNum(*v * 100) : v, "%.1f%%"));
      }
      md << " |\n";
    }
  }
  bool any_spread = false;
  for (const auto& row : r.rungs) any_spread = any_spread || !row.spread.empty();
  if (any_spread) {
    md << "\n## Spread\n\nEach measure over a rung's ok runs, one row a rung and a column a measure: the "
          "median, its 95% interval where there is one (Student t over the runs; with one run, the step "
          "time's from its own steps after warm-up, a moving-block bootstrap of the median: within the run, "
          "not between runs), and with 2 or more runs the coefficient of variation. A compare needs repeats "
          "(`sweep --repeats N`) for the rest.\n\n";
    // The measures any rung has, as columns in make_row's order.
    std::vector<std::pair<std::string, std::string>> measures;
    std::vector<std::pair<std::string, std::string>> candidates = {
        {"step time", "ms"}, {"samples/s", "1/s"}, {"training time", "s"}, {"time to target", "s"},
        {metric_measure(r.set.metric), r.set.metric.unit()}};
    // A set of several metrics (the smoke suite's): each other one a column, in rung order.
    for (const auto& row : r.rungs) candidates.emplace_back(metric_measure(row.metric), row.metric.unit());
    candidates.emplace_back("peak memory", "GB");
    for (const auto& m : candidates) {
      for (const auto& row : r.rungs) {
        const bool has = std::any_of(row.spread.begin(), row.spread.end(), [&](const RungRow::Spread& sp) {
          return sp.measure == m.first && sp.unit == m.second;
        });
        if (has && std::find(measures.begin(), measures.end(), m) == measures.end()) measures.push_back(m);
      }
    }
    md << "| rung | runs |";
    for (const auto& [measure, unit] : measures) md << " " << measure << (unit.empty() ? "" : " (" + unit + ")") << " |";
    md << "\n|---|---|";
    for (size_t i = 0; i < measures.size(); ++i) md << "---|";
    md << "\n";
    for (const auto& row : r.rungs) {
      if (row.spread.empty()) continue;
      int n = 0;
      for (const auto& sp : row.spread) n = std::max(n, sp.summary.n);
      md << "| " << escape_md(row.id) << " | " << n << " |";
      for (const auto& [measure, unit] : measures) {
        const RungRow::Spread* sp = nullptr;
        for (const auto& x : row.spread) {
          if (x.measure == measure && x.unit == unit) sp = &x;
        }
        if (sp == nullptr) {
          md << " - |";
          continue;
        }
        const auto& s = sp->summary;
        const char* f = unit == "GB" || unit == "%" ? "%.2f" : unit.empty() ? "%.4f" : "%.4g";
        std::string cell = fmt_num(s.median, f);
        if (s.ci_low) {
          cell += " [" + fmt_num(*s.ci_low, f) + ", " + fmt_num(*s.ci_high, f) + "] (t)";
        } else if (sp->within_run) {
          cell += " [" + fmt_num(sp->within_run->low, f) + ", " + fmt_num(sp->within_run->high, f) + "] (within run)";
        }
        if (s.n >= 2) cell += ", CV " + fmt_num(s.cv * 100, "%.1f%%");
        md << " " << cell << " |";
      }
      md << "\n";
    }
  }
  if (r.price_per_hour) {
    // Cost per point of a share: the rungs' share where a set holds a loss too.
    const train::MetricFacts* cm = &r.set.metric;
    for (const auto& row : r.rungs) {
      if (row.metric.proportion && !cm->proportion) cm = &row.metric;
    }
    md << "\n## Cost\n\nAt " << fmt_num(r.price_per_hour, "%.4g") << " an hour for each billed unit ("
       << escape_md(r.price_note) << "; a GPU run is billed by its GPUs, a CPU run by its machines). Cost per "
          "point: the run's cost over its test " << cm->name
       << (cm->proportion ? " in percentage points.\n\n" : " (a share's points; this metric has none).\n\n")
       << "| rung | devices | train time | billed units | cost | cost per " << cm->name << " point |\n"
          "|---|---|---|---|---|---|\n";
    for (const auto& row : r.rungs) {
      md << "| " << escape_md(row.id) << " | "
         << (row.devices_threads.empty() ? "-" : escape_md(row.devices_threads)) << " | "
         << time_cell(row.time_s, minutes) << " | " << row.billed_units << " | "
         << fmt_num(row.cost, "%.4g") << " | " << fmt_num(row.cost_per_point, "%.4g") << " |\n";
    }
  }
  md << target_markdown(r.set, r.targets);
  md << scaling_markdown(r.scaling);
  return md.str();
}

std::string report_csv(const Report& r) {
  std::ostringstream csv;
  csv << "kind,rung,article,changes,devices_threads,precision,strategy,epochs,runs,ok_runs,"
         "train_time_s,train_time_s_min,train_time_s_max,speedup_vs_scratch,speedup_vs_prev,"
         "test_acc,test_acc_min,test_acc_max,peak_memory_bytes_per_rank,images_per_s_per_device,"
         "images_per_s_total,mfu,time_to_target_s,status,article_time_min,"
         "article_speedup_vs_scratch,article_test_acc_pct,article_memory_gb,speedup_vs_base,"
         "article_speedup_vs_base,tokens_per_s_total,article_speedup_vs_prev,speedup_measure\n";
  for (const auto* rows : {&r.upstream, &r.rungs}) {
    for (const auto& row : *rows) {
      std::string mem;
      for (const double b : row.mem_per_rank) mem += (mem.empty() ? "" : ";") + fmt_num(b, "%.0f");
      csv << (row.upstream ? "upstream" : "rung") << "," << csv_field(row.id) << ","
          << csv_field(row.article) << "," << csv_field(row.changes) << ","
          << csv_field(row.devices_threads) << "," << csv_field(row.precision) << ","
          << csv_field(row.strategy) << ","
          << csv_num(row.epochs) << "," << row.runs << "," << row.ok_runs << ","
          << csv_num(row.time_s.median) << "," << csv_num(row.time_s.min) << ","
          << csv_num(row.time_s.max) << "," << csv_num(row.speedup_scratch) << ","
          << csv_num(row.speedup_prev) << "," << csv_num(row.acc.median) << ","
          << csv_num(row.acc.min) << "," << csv_num(row.acc.max) << "," << mem << ","
          << csv_num(row.ips_device.median) << "," << csv_num(row.ips_total.median) << ","
          << csv_num(row.mfu.median) << "," << csv_num(row.ttt_s.median) << ","
          << csv_field(row.status) << "," << csv_num(row.ref_time_min) << ","
          << csv_num(row.ref_speedup_scratch) << "," << csv_num(row.ref_acc_pct) << ","
          << csv_num(row.ref_mem_gb) << "," << csv_num(row.speedup_base) << ","
          << csv_num(row.ref_speedup_base) << "," << csv_num(row.tokens_total.median) << ","
          << csv_num(row.ref_speedup_prev) << "," << (row.upstream ? "" : r.speed_measure) << "\n";
    }
  }
  return csv.str();
}

}  // namespace accel::results
