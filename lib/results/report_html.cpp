// report.html: one self-contained page for a result set (and for a compare):
// the report's tables, the charts inline, and every run of every rung to
// drill into. No script, no external style, font or image: it opens from
// disk and shows the same with the network off. Every text from a result set
// is escaped; the charts are images (data: URIs), which a browser never runs.
// The page is well-formed XHTML, so a strict XML parser reads it too.
#include <algorithm>
#include <sstream>

#include "accel/results/compare.h"
#include "accel/results/report.h"
#include "accel/util/errors.h"
#include "accel/util/input_file.h"
#include "accel/util/json_doc.h"

namespace fs = std::filesystem;

namespace accel::results {

std::string html_text(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and CR.
        out += (u < 0x20 && c != '\t' && c != '\n' && c != '\r') || u == 0x7f ? ' ' : c;
    }
  }
  return out;
}

namespace {

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 |
                       uint32_t(uint8_t(bytes[i + 2]));
    out += k[v >> 18 & 63];
    out += k[v >> 12 & 63];
    out += k[v >> 6 & 63];
    out += k[v & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    out += k[v >> 18 & 63];
    out += k[v >> 12 & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += k[v >> 18 & 63];
    out += k[v >> 12 & 63];
    out += k[v >> 6 & 63];
    out += '=';
  }
  return out;
}

// The report's own Markdown (report_markdown, compare's tables) back to its
// text: "\|", "\[", "\]" and "\!" are the characters and "&lt;" a '<' there
// (markdown_text).
std::string markdown_unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && std::string("|[]!").find(s[i + 1]) != std::string::npos) {
      out += s[i + 1];
      ++i;
    } else if (s.compare(i, 4, "&lt;") == 0) {
      out += '<';
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Inline Markdown of accel-bench's own text: `code` and **strong**; the rest
// escaped.
std::string inline_html(const std::string& md) {
  const std::string s = markdown_unescape(md);
  std::string out;
  bool code = false, strong = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '`') {
      out += code ? "</code>" : "<code>";
      code = !code;
    } else if (!code && s.compare(i, 2, "**") == 0) {
      out += strong ? "</strong>" : "<strong>";
      strong = !strong;
      ++i;
    } else {
      out += html_text(std::string(1, s[i]));
    }
  }
  if (code) out += "</code>";
  if (strong) out += "</strong>";
  return out;
}

// The cells of a Markdown table row ("| a | b \| c |"), '\|' kept inside a cell.
std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cur;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cur += "\\|";
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(cur);
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  for (auto& c : cells) {
    const auto b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
    c = b == std::string::npos ? "" : c.substr(b, e - b + 1);
  }
  return cells;
}

bool separator_row(const std::string& line) {
  return line.size() > 2 && line[0] == '|' && line.find_first_not_of("|-: ") == std::string::npos;
}

}  // namespace

// The Markdown accel-bench writes (headings, tables, bullet lists,
// paragraphs, `code`, **strong**) as XHTML; headings one level down from
// `top` (a report's "# title" is the page's h1, so top = 1 keeps it).
std::string markdown_html(const std::string& md, int top) {
  std::istringstream in(md);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::ostringstream out;
  std::string para;
  auto flush_para = [&] {
    if (!para.empty()) out << "<p>" << inline_html(para) << "</p>\n";
    para.clear();
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.empty()) {
      flush_para();
    } else if (l[0] == '#') {
      flush_para();
      const auto n = l.find_first_not_of('#');
      const int level = std::min(6, int(n) + top - 1);
      out << "<h" << level << ">" << inline_html(l.substr(std::min(l.size(), n + 1))) << "</h" << level << ">\n";
    } else if (l[0] == '|' && i + 1 < lines.size() && separator_row(lines[i + 1])) {
      flush_para();
      out << "<div class=\"table\"><table>\n<thead><tr>";
      for (const auto& c : table_cells(l)) out << "<th>" << inline_html(c) << "</th>";
      out << "</tr></thead>\n<tbody>\n";
      for (i += 2; i < lines.size() && !lines[i].empty() && lines[i][0] == '|'; ++i) {
        out << "<tr>";
        for (const auto& c : table_cells(lines[i])) out << "<td>" << inline_html(c) << "</td>";
        out << "</tr>\n";
      }
      --i;
      out << "</tbody></table></div>\n";
    } else if (l.rfind("- ", 0) == 0) {
      flush_para();
      out << "<ul>\n";
      for (; i < lines.size() && lines[i].rfind("- ", 0) == 0; ++i) {
        out << "<li>" << inline_html(lines[i].substr(2)) << "</li>\n";
      }
      --i;
      out << "</ul>\n";
    } else {
      para += (para.empty() ? "" : " ") + l;
    }
  }
  flush_para();
  return out.str();
}

namespace {

constexpr const char* kStyle =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;max-width:1400px;"
    "padding:0 1em;color:#1a202c;line-height:1.4}"
    "h1{font-size:1.6em}h2{font-size:1.3em;border-bottom:1px solid #cbd5e0;padding-bottom:.2em;margin-top:1.6em}"
    "h3{font-size:1.1em}nav a{margin-right:1em}"
    ".table{overflow-x:auto}table{border-collapse:collapse;font-size:.85em;margin:.5em 0}"
    "th,td{border:1px solid #cbd5e0;padding:.25em .5em;text-align:left;vertical-align:top}"
    "th{background:#edf2f7}tbody tr:nth-child(even){background:#f7fafc}"
    "code,pre{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:.9em}"
    "pre{background:#f7fafc;border:1px solid #e2e8f0;padding:.6em;overflow-x:auto;max-height:30em}"
    "figure{display:inline-block;margin:.5em 1em .5em 0;vertical-align:top}"
    "figure img{max-width:100%;width:640px;border:1px solid #e2e8f0}"
    "details{border:1px solid #e2e8f0;border-radius:4px;padding:.3em .8em;margin:.4em 0}"
    "summary{cursor:pointer;font-weight:600}.warn{color:#9c4221}.muted{color:#4a5568}";

// The page as well-formed XHTML whatever reached it: text an XML parser
// refuses (ill-formed UTF-8 from a folder's name, U+FFFE) becomes U+FFFD.
std::string page(const std::string& title, const std::string& body) {
  return clean_text("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
         "<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n"
         "<title>" + html_text(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n" + body +
         "</body>\n</html>\n", std::string::npos, /*keep_lines=*/true);
}

std::string bytes_text(double b) {
  if (b >= 1e9) return fmt_num(b / 1e9, "%.2f GB");
  if (b >= 1e6) return fmt_num(b / 1e6, "%.1f MB");
  if (b >= 1e3) return fmt_num(b / 1e3, "%.1f kB");
  return fmt_num(b, "%.0f B");
}

// Rows of label and value, as a two-column table.
std::string pairs_table(const std::vector<std::pair<std::string, std::string>>& rows) {
  if (rows.empty()) return "";
  std::ostringstream t;
  t << "<div class=\"table\"><table><tbody>\n";
  // A run's resolved config is kept as written (its hash decides reuse):
  // its text is cleaned and cut here, where it is shown.
  for (const auto& [k, v] : rows) {
    t << "<tr><th>" << html_text(clean_text(k)) << "</th><td>" << html_text(clean_text(v)) << "</td></tr>\n";
  }
  t << "</tbody></table></div>\n";
  return t.str();
}

std::string number_text(const Json& v) {
  if (!v.is_number()) return v.is_string() ? v.get<std::string>() : v.dump();
  return counter_value(v.get<double>());
}

std::string run_html(const RunRecord& run, const std::string& name) {
  std::ostringstream h;
  h << "<h4>" << html_text(name) << ": " << html_text(run.status) << "</h4>\n";
  if (!run.error.empty()) h << "<p class=\"warn\">" << html_text(run.error) << "</p>\n";
  for (const auto& w : run.warnings) h << "<p class=\"warn\">warning: " << html_text(w) << "</p>\n";
  if (run.inject_delay > 0) {
    h << "<p class=\"warn\">fault injection: every step delayed by " << fmt_num(run.inject_delay * 100, "%g")
      << "% of its own time (train.inject_delay)</p>\n";
  }
  std::vector<std::pair<std::string, std::string>> facts = {
      {"strategy", run.strategy.empty() ? "n/a" : run.strategy},
      {"device", run.device},
      {"ranks x threads", std::to_string(run.world_size) + " x " + std::to_string(run.threads)},
      {"steps", std::to_string(run.steps)},
      {"training time", fmt_time(run.train_time_s)},
      {"step time (median)", fmt_num(run.step_ms_median, "%.2f ms")},
      {metric_measure(run.metric), fmt_metric(run.metric, run.test_acc)},
      {"samples/s", fmt_num(run.samples_per_s, "%.1f")},
      {"started", run.started_at.empty() ? "n/a" : run.started_at},
      {"finished", run.finished_at.empty() ? "n/a" : run.finished_at}};
  for (size_t e = 0; e < run.epoch_time_s.size(); ++e) {
    facts.emplace_back("epoch " + std::to_string(e + 1),
                       fmt_time(run.epoch_time_s[e]) + ", val " + run.metric.short_name() + " " +
                           (run.epoch_val_acc[e] != -1.0 ? fmt_metric(run.metric, run.epoch_val_acc[e]) : std::string("n/a")));
  }
  h << pairs_table(facts);
  if (run.step_split_ms.is_object()) {
    std::vector<std::pair<std::string, std::string>> split;
    for (const char* k : {"forward", "backward", "comm_wait", "optimizer", "other", "total"}) {
      if (const auto v = num_at(run.step_split_ms, k)) split.emplace_back(k, fmt_num(v, "%.2f ms"));
    }
    if (!split.empty()) h << "<h5>Step split (rank 0, mean after warm-up)</h5>\n" << pairs_table(split);
  }
  if (!run.ranks.empty()) {
    h << "<h5>Memory per rank</h5>\n<div class=\"table\"><table><thead><tr><th>rank</th><th>peak</th>"
         "<th>parameters</th><th>gradients</th><th>optimizer state</th></tr></thead><tbody>\n";
    for (size_t k = 0; k < run.ranks.size(); ++k) {
      const auto& r = run.ranks[k];
      const double peak = k < run.peak_memory_bytes.size() ? run.peak_memory_bytes[k] : double(r.peak_memory_bytes);
      h << "<tr><td>" << r.rank << "</td><td>" << bytes_text(peak) << "</td><td>" << bytes_text(double(r.param_bytes))
        << "</td><td>" << bytes_text(double(r.grad_bytes)) << "</td><td>" << bytes_text(double(r.optimizer_bytes))
        << "</td></tr>\n";
    }
    h << "</tbody></table></div>\n";
  }
  if (run.counters.is_object()) {
    std::vector<std::pair<std::string, std::string>> c;
    for (const char* k : {"step", "op_calls", "flops_counted", "flops_analytic", "flops_counted_over_analytic"}) {
      if (run.counters.contains(k)) c.emplace_back(k, number_text(run.counters[k]));
    }
    if (run.counters.contains("allocations") && run.counters["allocations"].is_object()) {
      const auto& a = run.counters["allocations"];
      c.emplace_back("tensor allocations", number_text(a.value("count", Json())) + " (" +
                                               bytes_text(num_at(a, "bytes").value_or(0)) + ", at most " +
                                               bytes_text(num_at(a, "peak_bytes").value_or(0)) + " live; " +
                                               str_at(a, "source") + ")");
    }
    h << "<h5>Exact work of one step</h5>\n" << pairs_table(c);
    if (run.counters.contains("op_calls_by_op") && run.counters["op_calls_by_op"].is_object()) {
      std::vector<std::pair<std::string, std::string>> ops;
      for (const auto& [op, n] : run.counters["op_calls_by_op"].items()) ops.emplace_back(op, number_text(n));
      h << "<details><summary>op calls by op (" << ops.size() << ")</summary>\n" << pairs_table(ops) << "</details>\n";
    }
  }
  if (run.comm_per_step.is_object() && run.comm_per_step.contains("collectives") &&
      run.comm_per_step["collectives"].is_array()) {
    h << "<h5>Collectives per step (rank 0)</h5>\n<div class=\"table\"><table><thead><tr><th>op</th>"
         "<th>primitive</th><th>bytes</th><th>calls per step</th></tr></thead><tbody>\n";
    for (const auto& c : run.comm_per_step["collectives"]) {
      h << "<tr><td>" << html_text(str_at(c, "op")) << "</td><td>" << html_text(str_at(c, "primitive")) << "</td><td>"
        << html_text(number_text(c.value("bytes", Json()))) << "</td><td>"
        << html_text(number_text(c.value("per_step", Json()))) << "</td></tr>\n";
    }
    h << "</tbody></table></div>\n";
  }
  if (!run.config.is_null()) {
    // Kept as written in the record (its hash decides reuse); shown cleaned and cut.
    Json shown = run.config;
    clean_strings(shown);
    h << "<details><summary>resolved config</summary>\n<pre>" << html_text(shown.dump(2)) << "</pre>\n</details>\n";
  }
  return h.str();
}

std::string machine_html(const ResultSet& set) {
  const Json env = set.env();
  std::vector<std::pair<std::string, std::string>> rows = {{"machine id", set.machine_id}};
  if (env.is_object()) {
    for (const auto& [k, v] : env.items()) {
      if (v.is_array()) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : ", ") + (x.is_string() ? x.get<std::string>() : x.dump());
        rows.emplace_back(k, s);
      } else {
        rows.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
      }
    }
  }
  return pairs_table(rows);
}

}  // namespace

namespace {

// A chart this report drew, as the page embeds it: a regular file (never
// through a link), at most kMaxChart bytes, that starts as an SVG document.
constexpr int64_t kMaxChart = int64_t{4} << 20;

std::string read_chart(const fs::path& svg) {
  std::string bytes = read_input_file(svg, "chart", kMaxChart, /*pipe_ok=*/false, /*follow_links=*/false);
  const auto start = bytes.find_first_not_of(" \t\r\n");
  if (start == std::string::npos || (bytes.compare(start, 5, "<?xml") != 0 && bytes.compare(start, 4, "<svg") != 0)) {
    throw DataError("chart " + svg.string() + ": not an SVG document (it should start with <?xml or <svg)");
  }
  return bytes;
}

}  // namespace

std::string report_html(const Report& r, const std::vector<fs::path>& charts) {
  const auto& set = r.set;
  const std::string title = (set.suite.empty() ? std::string("results") : set.suite) + " on " + set.machine_id;
  std::ostringstream b;
  b << "<h1>" << html_text(title) << "</h1>\n"
    << "<nav><a href=\"#summary\">summary</a><a href=\"#every-column\">every column</a><a href=\"#charts\">charts</a>"
       "<a href=\"#machine\">machine</a><a href=\"#rungs\">every run</a></nav>\n";
  // Only the charts this report drew, by name: whatever else a set's
  // charts/ holds (a link to /proc/self/environ in a pull request) is never read.
  std::vector<fs::path> svgs;
  for (const auto& f : charts) {
    if (f.extension() == ".svg") svgs.push_back(f);
  }
  std::sort(svgs.begin(), svgs.end());
  auto figure = [&](const fs::path& svg) {
    const std::string name = svg.stem().string();
    b << "<figure><img alt=\"" << html_text(name) << " chart\" src=\"data:image/svg+xml;base64," << base64(read_chart(svg))
      << "\"/><figcaption>" << html_text(name) << "</figcaption></figure>\n";
  };
  // The report's tables and sections, as report.md has them (its title is
  // the page's): the story first (the speedup chart, with its intervals and
  // the article's bars, beside the compact table), every column below.
  std::string md = report_markdown(r);
  if (md.rfind("# ", 0) == 0) md = md.substr(std::min(md.size(), md.find('\n') + 1));
  // The heading on a line of its own (a rung's text may hold the words).
  auto split = md.find("\n" + std::string(kEveryColumn) + "\n");
  if (split != std::string::npos) ++split;
  const std::string lead = md.substr(0, split), rest = split == std::string::npos ? "" : md.substr(split);
  b << "<section id=\"summary\">\n<h2>Summary</h2>\n";
  for (const auto& svg : svgs) {
    if (svg.stem() == "speedup") figure(svg);
  }
  b << markdown_html(lead, 2) << "</section>\n";
  if (!rest.empty()) {
    const auto heading_end = rest.find('\n');
    b << "<section id=\"every-column\">\n<h2>Every column</h2>\n"
      << markdown_html(heading_end == std::string::npos ? "" : rest.substr(heading_end + 1), 2) << "</section>\n";
  }
  b << "<section id=\"charts\">\n<h2>Charts</h2>\n";
  if (svgs.empty()) {
    b << "<p class=\"muted\">No charts: `accel-bench report` draws them with gnuplot, which was not found.</p>\n";
  }
  for (const auto& svg : svgs) {
    if (svg.stem() != "speedup") figure(svg);
  }
  b << "</section>\n<section id=\"machine\">\n<h2>Machine and versions</h2>\n" << machine_html(set) << "</section>\n";
  b << "<section id=\"rungs\">\n<h2>Every run</h2>\n";
  for (const auto* list : {&set.rungs, &set.upstream}) {
    for (const auto& rung : *list) {
      int ok = 0;
      for (const auto& run : rung.repeats) ok += run.ok() ? 1 : 0;
      b << "<details id=\"rung-" << html_text(rung.id) << "\"><summary>" << html_text(rung.id)
        << (rung.upstream ? " (upstream)" : "") << ": " << ok << " of " << rung.repeats.size() << " runs ok"
        << (rung.changes.empty() ? "" : "; " + html_text(rung.changes)) << "</summary>\n";
      for (size_t k = 0; k < rung.repeats.size(); ++k) {
        b << run_html(rung.repeats[k], rung.repeats.size() > 1 ? "run r" + std::to_string(k + 1) : "run");
      }
      b << "</details>\n";
    }
  }
  b << "</section>\n";
  return page(title, b.str());
}

std::string compare_html(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history) {
  std::ostringstream b;
  b << "<h1>compare</h1>\n" << markdown_html(compare_ci_markdown(outcomes, history), 2);
  for (const auto& o : outcomes) {
    b << "<section>\n" << markdown_html(o.markdown, 2) << "</section>\n";
  }
  return page("accel-bench compare", b.str());
}

}  // namespace accel::results
