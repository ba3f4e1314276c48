// The bar charts: their data (one row per rung, the right values), the CSV-only
// fallback without gnuplot, and -- where gnuplot is installed -- an SVG that
// parses, with one bar per rung whose height is proportional to its value and
// the value written on it.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "accel/results/charts.h"
#include "support/skip.h"
#include "support/temp_dir.h"
#include "unit/test_report_fixtures.h"

using accel::Json;
using accel::OptNum;
using namespace accel::results;
using namespace accel::machine;
using report_test::FakeRun;
using report_test::SetBuilder;

namespace {

std::string slurp(const std::filesystem::path& f) {
  std::ifstream in(f);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Well-formed XML, enough for what gnuplot writes: every element closed in
// order, quotes balanced inside tags; comments, <?...?> and <!...> skipped.
bool well_formed_xml(const std::string& x, std::string& why) {
  std::vector<std::string> open;
  size_t i = 0;
  while ((i = x.find('<', i)) != std::string::npos) {
    if (x.compare(i, 4, "<!--") == 0) {
      i = x.find("-->", i);
      if (i == std::string::npos) return why = "unclosed comment", false;
      continue;
    }
    size_t j = i + 1;
    char quote = 0;
    while (j < x.size() && (quote || x[j] != '>')) {
      if (quote && x[j] == quote) quote = 0;
      else if (!quote && (x[j] == '"' || x[j] == '\'')) quote = x[j];
      ++j;
    }
    if (j >= x.size()) return why = "unclosed tag at " + std::to_string(i), false;
    const std::string tag = x.substr(i + 1, j - i - 1);
    i = j;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag.back() == '/') continue;
    const auto name_end = tag.find_first_of(" \t\r\n/");
    if (tag[0] == '/') {
      const auto name = tag.substr(1, tag.find_first_of(" \t\r\n") - 1);
      if (open.empty() || open.back() != name) return why = "mismatched </" + name + ">", false;
      open.pop_back();
    } else {
      open.push_back(tag.substr(0, name_end));
    }
  }
  if (!open.empty()) return why = "unclosed <" + open.back() + ">", false;
  return true;
}

// The filled bars of one plot group (gnuplot_plot_N): heights in pixels, in
// order, without the legend's sample box (the group's first polygon).
std::vector<double> bar_heights(const std::string& svg, int plot) {
  const auto start = svg.find("<g id=\"gnuplot_plot_" + std::to_string(plot) + "\"");
  const auto end = svg.find("<g id=\"gnuplot_plot_" + std::to_string(plot + 1) + "\"");
  REQUIRE(start != std::string::npos);
  const std::string g = svg.substr(start, end == std::string::npos ? end : end - start);
  std::vector<double> heights;
  size_t i = 0;
  while ((i = g.find("points", i)) != std::string::npos) {
    const auto q = g.find_first_of("'\"", i);
    const auto e = g.find(g[q], q + 1);
    std::string pts = g.substr(q + 1, e - q - 1);
    std::replace(pts.begin(), pts.end(), ',', ' ');
    std::istringstream in(pts);
    double x, y, lo = 1e9, hi = -1e9;
    while (in >> x >> y) lo = std::min(lo, y), hi = std::max(hi, y);
    heights.push_back(hi - lo);
    i = e;
  }
  if (!heights.empty()) heights.erase(heights.begin());  // the legend sample
  return heights;
}

accel::results::Report sample_report(const std::filesystem::path& dir) {
  FakeRun a, b, c;
  a.time_s = 600, b.time_s = 300, c.time_s = 150;
  a.acc = 0.60, b.acc = 0.90, c.acc = 0.85;
  SetBuilder(dir)
      .reference({{"source", "s"},
                  {"rungs", {{"00", {{"time_min", 20.0}, {"test_acc_pct", 62.85}}},
                             {"02", {{"time_min", 6.0}, {"test_acc_pct", 93.0}}}}}})
      .rung("00-scratch", "00", {a})
      .rung("01-finetune", "01", {b})
      .needs("02-compile", "02", "CUDA")
      .rung("04-bf16", "04", {c})
      .write();
  return build_report(load_result_set(dir), PeakTable{});
}

}  // namespace

TEST_CASE("charts: the data has one row per rung with our value and the article's") {
  accel_test::TempDir tmp;
  const auto data = chart_data(sample_report(tmp.path));
  REQUIRE(data.size() == 2);
  CHECK(data[0].name == "runtime");
  CHECK(data[0].ylabel == "training time (min)");
  CHECK(data[0].csv ==
        "rung,ours,ours_low,ours_high,article\n00-scratch,10,10,10,20\n01-finetune,5,5,5,\n"
        "02-compile,,,,6\n04-bf16,2.5,2.5,2.5,\n");
  CHECK(data[1].csv ==
        "rung,ours,ours_low,ours_high,article\n00-scratch,60,60,60,62.85\n01-finetune,90,90,90,\n"
        "02-compile,,,,93\n04-bf16,85,85,85,\n");
}

TEST_CASE("charts: without gnuplot only the CSVs are written, with a one-line notice") {
  accel_test::TempDir tmp;
  const auto rep = sample_report(tmp / "set");
  const auto out = write_charts(rep, tmp / "charts", "/nonexistent/gnuplot");
  CHECK(out.notice.find("gnuplot not found") != std::string::npos);
  CHECK(out.notice.find('\n') == std::string::npos);
  CHECK(std::filesystem::exists(tmp / "charts/runtime.csv"));
  CHECK(std::filesystem::exists(tmp / "charts/accuracy.csv"));
  CHECK_FALSE(std::filesystem::exists(tmp / "charts/runtime.svg"));
}

TEST_CASE("charts: gnuplot's SVG parses, one bar per rung in proportion, values on the bars") {
  if (find_program("gnuplot").empty()) {
    accel_test::skip("gnuplot not installed (scripts/setup.sh installs gnuplot-nox)");
    return;
  }
  accel_test::TempDir tmp;
  const auto rep = sample_report(tmp / "set");
  const auto out = write_charts(rep, tmp / "charts");
  REQUIRE_MESSAGE(out.notice.empty(), out.notice);
  for (const char* name : {"runtime", "accuracy"}) {
    INFO(name);
    const auto svg = slurp(tmp / "charts" / (std::string(name) + ".svg"));
    std::string why;
    CHECK_MESSAGE(well_formed_xml(svg, why), why);
    CHECK(std::filesystem::file_size(tmp / "charts" / (std::string(name) + ".png")) > 1000);
    for (const char* rung : {"00-scratch", "01-finetune", "02-compile", "04-bf16"}) {
      CHECK(svg.find(std::string(">") + rung + "<") != std::string::npos);
    }
  }
  const auto svg = slurp(tmp / "charts/runtime.svg");
  // Ours: 10, 5, (none), 2.5 min; the article's: 20 and 6 min.
  const auto ours = bar_heights(svg, 1);
  REQUIRE(ours.size() == 3);
  CHECK(ours[1] / ours[0] == doctest::Approx(0.5).epsilon(0.02));
  CHECK(ours[2] / ours[0] == doctest::Approx(0.25).epsilon(0.02));
  const auto article = bar_heights(svg, 2);
  REQUIRE(article.size() == 2);
  CHECK(article[0] / ours[0] == doctest::Approx(2.0).epsilon(0.02));
  for (const char* label : {">10.0<", ">5.00<", ">2.50<", ">20.0<", ">6.00<", ">n/a<"}) {
    CHECK_MESSAGE(svg.find(label) != std::string::npos, label);
  }
  CHECK(svg.find("training time (min)") != std::string::npos);
  CHECK(svg.find("article (A100)") != std::string::npos);
  // An absent bar is labelled, never left to read as zero: ours for one rung,
  // the article's for the two it has no figure for.
  size_t na = 0;
  for (size_t at = svg.find(">n/a<"); at != std::string::npos; at = svg.find(">n/a<", at + 1)) ++na;
  CHECK(na == 3);
  // Beside the article's bars the values stand upright, so neighbours never
  // run into each other.
  CHECK(svg.find("rotate(-90") != std::string::npos);
}

TEST_CASE("report html: one well-formed page, every text escaped, charts inline, every run to drill into") {
  accel_test::TempDir tmp;
  FakeRun a, b;
  b.time_s = 300;
  b.config_patch = {{"description", "<script>alert(1)</script> & 'quotes'"}};
  SetBuilder builder(tmp / "set");
  builder.reference({{"source", "s"}, {"rungs", {{"00", {{"time_min", 20.0}, {"test_acc_pct", 62.85}}}}}})
      .rung("00-scratch", "00", {a})
      .rung("01-finetune", "01", {b, b});
  builder.manifest["rungs"][1]["changes"] = "init from <b>pretrain</b> | more";
  builder.write();
  const auto rep = build_report(load_result_set(tmp / "set"), PeakTable{});
  const bool gnuplot = !find_program("gnuplot").empty();
  std::vector<std::filesystem::path> drawn;
  if (gnuplot) drawn = write_charts(rep, tmp / "set" / "charts").files;
  const std::string html = report_html(rep, drawn);
  std::string why;
  CHECK_MESSAGE(well_formed_xml(html, why), why);
  CHECK(html.rfind("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\"", 0) == 0);
  // No script, nothing fetched: the only URL is the XHTML namespace.
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  size_t urls = 0;
  for (size_t at = html.find("http://"); at != std::string::npos; at = html.find("http://", at + 1)) ++urls;
  CHECK(urls == 1);
  CHECK(html.find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#39;quotes&#39;") != std::string::npos);
  CHECK(html.find("init from &lt;b&gt;pretrain&lt;/b&gt; | more") != std::string::npos);
  // The sections, one drill-down per rung with each repeat.
  for (const char* id : {"id=\"summary\"", "id=\"charts\"", "id=\"machine\"", "id=\"rungs\"",
                         "id=\"rung-00-scratch\"", "id=\"rung-01-finetune\""}) {
    CHECK_MESSAGE(html.find(id) != std::string::npos, id);
  }
  CHECK(html.find("<h4>run r2: ok</h4>") != std::string::npos);
  CHECK(html.find("resolved config") != std::string::npos);
  // The report's own table, as report.md has it.
  CHECK(html.find("<th>rung</th><th>article</th><th>what changed</th>") != std::string::npos);
  if (gnuplot) {
    CHECK(html.find("<img alt=\"runtime chart\" src=\"data:image/svg+xml;base64,") != std::string::npos);
  } else {
    CHECK(html.find("No charts") != std::string::npos);
  }
}

namespace {

// A ladder's first three rungs, two of them pretrained, with the article's times.
Report story_report(const std::filesystem::path& dir) {
  FakeRun scratch, finetune, bf16;
  scratch.time_s = 600, finetune.time_s = 200, bf16.time_s = 100;
  finetune.config_patch = bf16.config_patch = {{"model", {{"init", {{"safetensors", "w.safetensors"}}}}}};
  SetBuilder(dir)
      .reference({{"source", "s"}, {"rungs", {{"00", {{"time_min", 60.0}}}, {"01", {{"time_min", 20.0}}}, {"04", {{"time_min", 5.0}}}}}})
      .rung("00-scratch", "00", {scratch})
      .rung("01-finetune", "01", {finetune})
      .rung("04-bf16", "04", {bf16})
      .write();
  return build_report(load_result_set(dir), PeakTable{});
}

bool has_text(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("report: report.md leads with a compact table and puts every column below and every table's rows match its header") {
  accel_test::TempDir tmp;
  const auto rep = story_report(tmp / "set");
  const auto md = report_markdown(rep);
  INFO(md);
  // The compact table right under the title, the full one under "Every column".
  const auto compact = md.find("| rung | what changed | train time | vs prev | vs scratch | article vs prev | test acc | peak mem/rank | status |");
  const auto every = md.find("## Every column");
  const auto full = md.find("| rung | article | what changed |");
  REQUIRE(compact != std::string::npos);
  CHECK(compact == md.find('\n') + 2);
  CHECK(compact < every);
  CHECK(every < full);
  CHECK(has_text(md, "| 04-bf16 | change 04-bf16 | 1.67 min | 2.00x ["));
  CHECK(has_text(md, "] faster | 4.00x | 80.00% | 1.00 GB | ok |"));  // article vs prev: its 20 min over 5
  // One run a rung: no MLPerf section.
  CHECK_FALSE(has_text(md, "## Time to target, MLPerf-scored"));
  // Every table's separator has as many cells as its header, and every row
  // as many as both (a renderer refuses a table whose counts differ).
  std::istringstream in(md);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  int tables = 0;
  auto cells = [](const std::string& l) { return std::count(l.begin(), l.end(), '|'); };
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i].rfind("| ", 0) != 0 || lines[i + 1].rfind("|---", 0) != 0) continue;
    ++tables;
    CAPTURE(lines[i]);
    CHECK(cells(lines[i + 1]) == cells(lines[i]));
    for (size_t k = i + 2; k < lines.size() && lines[k].rfind("| ", 0) == 0; ++k) {
      CAPTURE(lines[k]);
      CHECK(cells(lines[k]) == cells(lines[i]));
    }
  }
  CHECK(tables >= 3);  // compact, every column, spread
  // The speedup chart draws each bar's interval.
  const auto charts = chart_data(rep);
  REQUIRE(charts.size() == 3);
  const auto script = gnuplot_script(charts[2], "sub", "article (A100)");
  CHECK(has_text(script, "using ($0-1.0/6):3:(0):($4-$3) with vectors heads"));
}

TEST_CASE("report html: the page leads with the speedup chart and the compact table and puts every column and the other charts and every run below") {
  if (find_program("gnuplot").empty()) {
    accel_test::skip("gnuplot not installed (scripts/setup.sh installs gnuplot-nox): no charts to place");
    return;
  }
  accel_test::TempDir tmp;
  const auto rep = story_report(tmp / "set");
  const auto drawn = write_charts(rep, tmp / "set" / "charts").files;
  const std::string html = report_html(rep, drawn);
  std::string why;
  CHECK_MESSAGE(well_formed_xml(html, why), why);
  const auto chart = html.find("<img alt=\"speedup chart\"");
  const auto table = html.find("<th>rung</th><th>what changed</th>");
  const auto columns = html.find("id=\"every-column\"");
  const auto others = html.find("<img alt=\"runtime chart\"");
  const auto runs = html.find("id=\"rungs\"");
  REQUIRE(chart != std::string::npos);
  CHECK(chart < table);
  CHECK(table < columns);
  CHECK(columns < others);
  CHECK(others < runs);
  CHECK(html.find("<img alt=\"speedup chart\"", chart + 1) == std::string::npos);  // once
}

TEST_CASE("report html: the markdown renderer keeps escaped pipes in a cell and closes every tag") {
  const std::string md = "# t\n\nSome `code` and **bold** & <b>.\n\n| a | b |\n|---|---|\n| x \\| y | &lt;z |\n\n- one\n- two\n";
  const auto html = markdown_html(md, 2);
  std::string why;
  CHECK_MESSAGE(well_formed_xml("<div>" + html + "</div>", why), why);
  CHECK(html.find("<h2>t</h2>") != std::string::npos);
  CHECK(html.find("<p>Some <code>code</code> and <strong>bold</strong> &amp; &lt;b&gt;.</p>") != std::string::npos);
  CHECK(html.find("<td>x | y</td><td>&lt;z</td>") != std::string::npos);
  CHECK(html.find("<ul>\n<li>one</li>\n<li>two</li>\n</ul>") != std::string::npos);
}
