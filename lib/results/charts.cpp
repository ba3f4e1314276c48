#include "accel/results/charts.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "accel/metrics/metrics.h"
#include "accel/util/child_process.h"

namespace fs = std::filesystem;

namespace accel::results {

namespace {

OptNum scaled(OptNum v, double k) { return v ? OptNum(*v * k) : v; }

std::string csv_label(const std::string& s) {
  std::string out;
  // Never a live spreadsheet formula, as report.csv's cells (csv_text).
  if (!s.empty() && std::string("=+-@\t\r").find(s.front()) != std::string::npos) out += '\'';
  for (const char c : s) out += (c == ',' || c == '"') ? ' ' : c;
  return out;
}

ChartData runtime_chart(const Report& r) {
  // Minutes as the article, unless every figure is under two minutes.
  double largest = 0;
  for (const auto& row : r.rungs) {
    largest = std::max({largest, row.time_s.max.value_or(0), row.ref_time_min.value_or(0) * 60});
  }
  const bool minutes = largest >= 120;
  const double k = minutes ? 1.0 / 60 : 1.0;
  ChartData c;
  c.name = "runtime";
  c.ylabel = minutes ? "training time (min)" : "training time (s)";
  c.title = "Training time per rung";
  std::ostringstream csv;
  csv << "rung,ours,ours_low,ours_high,article\n";
  for (const auto& row : r.rungs) {
    csv << csv_label(row.comparable ? row.id : row.id + " (cut short)") << "," << csv_num(scaled(row.time_s.median, k)) << ","
        << csv_num(scaled(row.time_s.min, k)) << "," << csv_num(scaled(row.time_s.max, k)) << ","
        << csv_num(scaled(row.ref_time_min, 60 * k)) << "\n";
  }
  c.csv = csv.str();
  return c;
}

ChartData accuracy_chart(const Report& r) {
  ChartData c;
  c.name = "accuracy";
  const auto& m = r.set.metric;
  c.ylabel = metric_measure(m) + (m.proportion ? " (%)" : "");
  c.title = "Test " + m.name + " per rung" + (r.mixed_metrics ? " (rungs of another metric: no bar)" : "");
  const double k = m.scale();
  std::ostringstream csv;
  csv << "rung,ours,ours_low,ours_high,article\n";
  for (const auto& row : r.rungs) {
    // A rung of another metric (a mixed set's) has no bar on this axis.
    const bool own = row.metric == m;
    csv << csv_label(row.comparable ? row.id : row.id + " (cut short)") << ","
        << csv_num(own ? scaled(row.acc.median, k) : std::nullopt) << ","
        << csv_num(own ? scaled(row.acc.min, k) : std::nullopt) << ","
        << csv_num(own ? scaled(row.acc.max, k) : std::nullopt) << "," << csv_num(row.ref_acc_pct) << "\n";
  }
  c.csv = csv.str();
  return c;
}

// Each rung's training time relative to the ladder's first pretrained rung,
// ours beside the article's: the ladder's shape, which a CPU's minutes next
// to an A100's cannot show. Bars: median; low/high the speedup's 95%
// interval (RungRow::speedup_base_iv).
ChartData speedup_chart(const Report& r) {
  ChartData c;
  c.name = "speedup";
  c.ylabel = "speedup vs " + (r.speedup_base.empty() ? std::string("first pretrained rung")
                                                     : r.speedup_base) + " (x)";
  // What the speedups divide (Report::speed_measure).
  c.title = r.speed_measure == kSpeedSteadyStep ? "Steady-step speedup per rung (step per sample)"
                                                : "Training-time speedup per rung";
  std::ostringstream csv;
  csv << "rung,ours,ours_low,ours_high,article\n";
  for (const auto& row : r.rungs) {
    // Error bars: the speedup's 95% interval (between runs, or the floor a
    // one-run rung is given), as the report's table has it.
    OptNum low, high;
    if (row.speedup_base_iv && row.comparable) {
      low = row.speedup_base_iv->iv.low;
      high = row.speedup_base_iv->iv.high;
    }
    csv << csv_label(row.comparable ? row.id : row.id + " (cut short)") << ","
        << csv_num(row.speedup_base) << "," << csv_num(low) << "," << csv_num(high) << ","
        << csv_num(row.ref_speedup_base) << "\n";
  }
  c.csv = csv.str();
  return c;
}

}  // namespace

// gnuplot runs a command in backquotes inside a double-quoted string, and a
// raw newline ends a command: a string from data (an id, a machine id, a
// folder name, a reference's hardware name) is therefore always a
// single-quoted gnuplot string, which gnuplot takes as it is ('' for a
// quote), with control characters made spaces. The scripts' own literals
// (fonts, formats, "\n") are the only double-quoted strings.
std::string gnuplot_string(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += ' ';
    } else if (c == '\'') {
      out += "''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

namespace {

// Samples/s on 1..8 devices as each multi-rank rung's prediction says (one
// line per strategy, from its first rung), and the rungs' measured points.
ChartData scaling_chart(const Report& r) {
  ChartData c;
  c.name = "scaling";
  c.kind = "lines";
  c.title = "Predicted scaling (lines) and measured rungs (points)";
  c.ylabel = "samples/s, all devices";
  std::vector<const ScalingLine*> lines;
  for (const auto& l : r.scaling) {
    if (std::none_of(lines.begin(), lines.end(), [&](const ScalingLine* x) { return x->strategy == l.strategy; })) {
      lines.push_back(&l);
    }
  }
  std::ostringstream csv;
  csv << "devices";
  for (const auto* l : lines) {
    csv << "," << csv_label(l->strategy + " predicted (from " + l->base + ")") << ","
        << csv_label(l->strategy + " measured");
  }
  csv << "\n";
  for (int n = 1; n <= 8; ++n) {
    csv << n;
    for (const auto* l : lines) {
      OptNum predicted, measured;
      for (const auto& p : l->rows) {
        if (p.devices == n) predicted = p.samples_per_s;
      }
      for (const auto& m : r.scaling) {
        if (m.strategy == l->strategy && m.measured_devices == n && m.measured_samples_per_s) {
          measured = m.measured_samples_per_s;
        }
      }
      csv << "," << csv_num(predicted) << "," << csv_num(measured);
    }
    csv << "\n";
  }
  c.csv = csv.str();
  return c;
}

// "set title" with the chart's title and the subtitle as its second line
// (the line break a double-quoted "\n" joined between the two strings).
std::string title_lines(const std::string& title, const std::string& subtitle) {
  return "set title " + gnuplot_string(title) + ".\"\\n\"." + gnuplot_string(subtitle) + " noenhanced\n";
}

// The plot drawn twice, as NAME.svg.part and NAME.png.part in the charts
// folder gnuplot runs in (write_charts checks and renames them).
std::string svg_and_png(const std::string& name, const std::string& plot) {
  std::string out;
  for (const auto& [term, ext] : {std::pair{"svg size 960,540 dynamic font \"sans,12\" "
                                            "background \"white\"", "svg"},
                                  std::pair{"pngcairo size 960,540 font \"sans,11\"", "png"}}) {
    out += std::string("set terminal ") + term + "\nset output " +
           gnuplot_string(name + "." + ext + ".part") + "\n" + plot + "set output\n";
  }
  return out;
}

std::string lines_script(const ChartData& c, const std::string& subtitle, int series) {
  const std::string data = gnuplot_string(c.name + ".csv");
  std::ostringstream gp;
  gp << "set datafile separator ','\nset key top left noenhanced\nset grid\n"
     << title_lines(c.title, subtitle)
     << "set ylabel " << gnuplot_string(c.ylabel) << " noenhanced\nset xlabel 'devices'\nset xrange [0.5:8.5]\n"
     << "set yrange [0:*]\nset xtics 1\n";
  std::ostringstream plot;
  plot << "plot for [i=2:" << (1 + 2 * series) << ":2] " << data
       << " using 1:i with linespoints lw 2 pt 6 title columnhead(i), for [i=3:" << (1 + 2 * series)
       << ":2] " << data << " using 1:i with points pt 7 ps 2 title columnhead(i)\n";
  return gp.str() + svg_and_png(c.name, plot.str());
}

bool has_article(const Report& r) {
  return std::any_of(r.rungs.begin(), r.rungs.end(),
                     [](const RungRow& row) { return row.ref_time_min || row.ref_acc_pct; });
}


}  // namespace

// Clustered bars: ours (and the article's) per rung, each labelled with its
// value. With two series and gap 1 the bars sit at x -/+ 1/6.
std::string gnuplot_script(const ChartData& c, const std::string& subtitle,
                           const std::string& article_title) {
  const std::string data = gnuplot_string(c.name + ".csv");
  const bool two = !article_title.empty();
  const char* off_ours = two ? "-1.0/6" : "0";
  std::ostringstream gp;
  gp << "set datafile separator ','\n"
     << "set style data histograms\nset style histogram clustered gap 1\n"
     << "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
     << title_lines(c.title, subtitle)
     << "set ylabel " << gnuplot_string(c.ylabel) << " noenhanced\nset xlabel 'rung'\n"
     << "set yrange [0:*]\nset offsets 0,0,graph " << (two ? "0.18" : "0.12") << ",0\nset grid ytics\n"
     // The key on the left: a ladder's tallest bars (and their upright
     // labels) are its last rungs, on the right.
     << "set xtics rotate by -20 noenhanced nomirror\nset key top " << (two ? "left" : "right")
     << " noenhanced\n";
  std::ostringstream plot;
  plot << "plot " << data << " skip 1 using 2:xtic(1) title 'this machine' lc rgb '#2b6cb0'";
  if (two) {
    plot << ", '' skip 1 using 5 title " << gnuplot_string(article_title) << " lc rgb '#dd6b20'";
  }
  // Values on the bars (2 decimals under 10, else 1); "n/a" where a series
  // has no figure for the rung, so that an absent bar never reads as zero.
  // Beside an article's bars the labels stand upright above each bar: two
  // values side by side on a narrow cluster ran into each other ("1.001.00").
  auto label = [](int col) {
    const std::string c = "$" + std::to_string(col);
    return "(" + c + "<10 ? sprintf(\"%.2f\"," + c + ") : sprintf(\"%.1f\"," + c + "))";
  };
  const std::string style = two ? " with labels rotate by 90 left offset 0,0.4 font \",9\" notitle"
                                : " with labels offset 0,0.8 font \",10\" notitle";
  const std::string missing_style = two ? " with labels rotate by 90 left offset 0,0.4 font \",8\" tc rgb \"#555555\" notitle"
                                        : " with labels offset 0,0.8 font \",9\" tc rgb \"#555555\" notitle";
  // Our bars' error bars: columns 3 and 4 (the speedup's 95% interval, or
  // the fastest and slowest run), where the row has them; our labels sit
  // above the bar's top whisker.
  plot << ", '' skip 1 using ($0" << off_ours << "):3:(0):($4-$3) with vectors heads size 0.04,90 lw 1.5 "
          "lc rgb '#1a202c' notitle";
  plot << ", '' skip 1 using ($0" << off_ours << "):(valid(4) ? $4 : $2):" << label(2) << style;
  if (two) plot << ", '' skip 1 using ($0+1.0/6):5:" << label(5) << style;
  // valid(N), not strcol(N): an empty last field is no column at all to
  // gnuplot, and a row whose label reads one is dropped.
  plot << ", '' skip 1 using ($0" << off_ours << "):(0):(valid(2) ? \"\" : \"n/a\")" << missing_style;
  if (two) plot << ", '' skip 1 using ($0+1.0/6):(0):(valid(5) ? \"\" : \"n/a\")" << missing_style;
  plot << "\n";
  return gp.str() + svg_and_png(c.name, plot.str());
}

namespace {

// A chart file gnuplot wrote completely: an SVG that ends with its closing
// tag, a PNG that ends with its IEND chunk (a full disk leaves either cut).
bool complete_chart(const fs::path& file, const std::string& ext) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec || size < 16) return false;
  std::ifstream in(file, std::ios::binary);
  const std::size_t tail = std::min<std::size_t>(size, 64);
  in.seekg(std::streamoff(size - tail));
  std::string end(tail, '\0');
  in.read(end.data(), std::streamsize(tail));
  if (!in) return false;
  if (ext == "svg") return end.find("</svg>") != std::string::npos;
  return end.size() >= 12 && end.compare(end.size() - 8, 4, "IEND") == 0;
}

}  // namespace

std::vector<ChartData> chart_data(const Report& r) {
  std::vector<ChartData> charts{runtime_chart(r), accuracy_chart(r)};
  if (!r.speedup_base.empty()) charts.push_back(speedup_chart(r));
  if (!r.scaling.empty()) charts.push_back(scaling_chart(r));
  return charts;
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return ::access(name.c_str(), X_OK) == 0 ? name : "";
  }
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string d;
  while (std::getline(ss, d, ':')) {
    const auto p = fs::path(d.empty() ? "." : d) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

namespace {

// Draws one chart with gnuplot in the charts folder, on relative names: no
// path from the disk enters a script. Its outputs go to NAME.EXT.part,
// checked complete, then renamed over the previous chart, which a failure
// leaves in place.
void draw_chart(const ChartData& c, const std::string& script_text, const fs::path& dir, const std::string& program,
                ChartOutput& out) {
  const auto script = dir / (c.name + ".gp");
  metrics::write_file_atomic(script, script_text);
  out.files.push_back(script);
  for (const char* ext : {"svg", "png"}) fs::remove(dir / (c.name + "." + ext + ".part"));  // a killed run's
  const auto log = dir / (c.name + ".gnuplot.log");
  const auto res = util::run_child({program, script.filename().string()}, log,
                                   [](const std::string&) {}, dir);
  std::vector<std::string> bad;
  for (const char* ext : {"svg", "png"}) {
    const auto part = dir / (c.name + "." + ext + ".part");
    if (res.exit_code != 0 || !complete_chart(part, ext)) bad.push_back(c.name + "." + ext);
  }
  if (!bad.empty()) {
    for (const char* ext : {"svg", "png"}) fs::remove(dir / (c.name + "." + ext + ".part"));
    std::string names;
    for (const auto& b : bad) names += (names.empty() ? "" : " and ") + b;
    out.failed.push_back(names);
    out.notice += std::string(out.notice.empty() ? "" : "\n") + "charts: " + names +
                  " not written (" +
                  (res.exit_code != 0 ? "gnuplot: " + res.last_line
                                      : std::string("cut short: a full disk?")) +
                  "); " + (dir / c.name).string() + ".* as before";
    return;
  }
  for (const char* ext : {"svg", "png"}) {
    const auto final_name = dir / (c.name + "." + ext);
    fs::rename(dir / (c.name + "." + ext + ".part"), final_name);
    out.files.push_back(final_name);
  }
  fs::remove(log);
}

}  // namespace

ChartOutput write_charts(const Report& r, const fs::path& dir, const std::string& gnuplot) {
  fs::create_directories(dir);
  ChartOutput out;
  const auto data = chart_data(r);
  for (const auto& c : data) {
    metrics::write_file_atomic(dir / (c.name + ".csv"), c.csv);
    out.files.push_back(dir / (c.name + ".csv"));
  }
  const auto program = find_program(gnuplot);
  if (program.empty()) {
    out.notice = "charts: gnuplot not found (apt-get install gnuplot-nox): wrote the chart data "
                 "as CSV only, in " + dir.string();
    return out;
  }
  const std::string subtitle = r.set.suite + " on " + r.set.machine_id;
  const std::string article =
      has_article(r) ? "article (" + str_at(r.set.reference, "hardware_short", "A100") + ")" : "";
  for (const auto& c : data) {
    const int series = int(std::count(c.csv.begin(), c.csv.begin() + long(c.csv.find('\n')), ',') / 2);
    draw_chart(c, c.kind == "lines" ? lines_script(c, subtitle, series) : gnuplot_script(c, subtitle, article),
               dir, program, out);
  }
  return out;
}

ChartOutput write_trend_chart(const ChartData& c, const std::string& subtitle, const fs::path& dir,
                              const std::string& gnuplot) {
  fs::create_directories(dir);
  ChartOutput out;
  metrics::write_file_atomic(dir / (c.name + ".csv"), c.csv);
  out.files.push_back(dir / (c.name + ".csv"));
  const auto program = find_program(gnuplot);
  if (program.empty()) {
    out.notice = "charts: gnuplot not found (apt-get install gnuplot-nox): wrote the trend as CSV only, in " +
                 dir.string();
    return out;
  }
  const int series = int(std::count(c.csv.begin(), c.csv.begin() + long(c.csv.find('\n')), ','));
  const std::string data = gnuplot_string(c.name + ".csv");
  std::ostringstream gp;
  gp << "set datafile separator ','\nset key top left noenhanced\nset grid\n" << title_lines(c.title, subtitle)
     << "set ylabel " << gnuplot_string(c.ylabel) << " noenhanced\nset xlabel 'result set (oldest first)'\n"
     << "set yrange [0:*]\nset xtics 1\n";
  std::ostringstream plot;
  plot << "plot for [i=2:" << (1 + series) << "] " << data
       << " using 1:i with linespoints lw 2 pt 7 title columnhead(i)\n";
  draw_chart(c, gp.str() + svg_and_png(c.name, plot.str()), dir, program, out);
  return out;
}

}  // namespace accel::results
