// The communication half of `accel-bench predict` (accel/machine/predict.h):
// the alpha-beta fit, ring collectives over a link, and the links themselves
// (published, results/reference/links.json, or fitted by calibrate --comm).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "accel/machine/predict.h"
#include "accel/util/errors.h"

namespace accel::machine {

AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& pts) {
  std::vector<double> sizes;
  for (const auto& [b, t] : pts) {
    if (!(t > 0) || !(b >= 0)) throw ConfigError("alpha-beta fit: a point with no time or a negative size");
    if (std::find(sizes.begin(), sizes.end(), b) == sizes.end()) sizes.push_back(b);
  }
  if (sizes.size() < 2) throw ConfigError("alpha-beta fit: needs at least two message sizes");
  std::sort(sizes.begin(), sizes.end());
  // Robust to the hiccups of a shared machine, which hit small messages
  // hardest: beta from the larger half of the sizes (least squares with an
  // intercept: bandwidth is what large messages measure), alpha from the
  // smaller half (the median of what beta leaves of their times).
  const double split = sizes[sizes.size() / 2];
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) {
    if (x < split) continue;
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  AlphaBeta f;
  const double den = n * sxx - sx * sx;
  f.beta_s_per_byte = den > 0 ? std::max(0.0, (n * sxy - sx * sy) / den) : 0.0;
  if (f.beta_s_per_byte == 0 && sx > 0) f.beta_s_per_byte = sy / sx;  // one large size: through the origin
  std::vector<double> rest;
  for (const auto& [x, y] : pts) {
    if (x < split) rest.push_back(y - x * f.beta_s_per_byte);
  }
  std::sort(rest.begin(), rest.end());
  const size_t m = rest.size();
  const double alpha = m % 2 ? rest[m / 2] : (rest[m / 2 - 1] + rest[m / 2]) / 2;
  f.alpha_s = std::max(0.0, alpha);
  return f;
}

Collective collective_from_name(const std::string& name) {
  if (name == "all_reduce") return Collective::AllReduce;
  if (name == "all_gather") return Collective::AllGather;
  if (name == "reduce_scatter") return Collective::ReduceScatter;
  throw ConfigError("unknown collective \"" + name + "\" (all_reduce, all_gather, reduce_scatter)");
}

std::string collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
  }
  return "?";
}

namespace {
// 4096 -> "4 KiB", 67108864 -> "64 MiB".
std::string format_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g %s", b, unit[u]);
  return buf;
}

// Hops of a ring collective over `ranks` ranks, each carrying bytes / ranks.
double hops(Collective c, int ranks) {
  return c == Collective::AllReduce ? 2.0 * (ranks - 1) : double(ranks - 1);
}
}  // namespace

double ring_seconds(Collective c, const Link& link, int ranks, double bytes) {
  if (ranks <= 1) return 0;
  const double chunk = bytes / ranks;
  return hops(c, ranks) * (link.latency_s + (link.bytes_per_s > 0 ? chunk / link.bytes_per_s : 0));
}

Link link_from_fit(Collective c, const AlphaBeta& fit, int ranks, const std::string& name) {
  if (ranks < 2) throw ConfigError("a collective fitted on " + std::to_string(ranks) + " rank(s) implies no link");
  const double h = hops(c, ranks);
  Link l;
  l.name = name;
  l.latency_s = fit.alpha_s / h;
  // t = h * (alpha + bytes / (ranks * bw))  =>  beta = h / (ranks * bw)
  l.bytes_per_s = fit.beta_s_per_byte > 0 ? h / (ranks * fit.beta_s_per_byte) : 0;
  return l;
}

MeasuredCollective MeasuredCollective::from_points(int ranks, std::vector<std::pair<double, double>> points) {
  std::sort(points.begin(), points.end());
  for (size_t i = points.size(); i-- > 1;) points[i - 1].second = std::min(points[i - 1].second, points[i].second);
  return {ranks, std::move(points)};
}

std::optional<double> MeasuredCollective::seconds(int n, double bytes) const {
  const auto& e = envelope;
  if (n != ranks || e.empty() || bytes < e.front().first || bytes > e.back().first) return std::nullopt;
  const auto hi = std::lower_bound(e.begin(), e.end(), std::make_pair(bytes, 0.0));
  if (hi->first == bytes || hi == e.begin()) return hi->second;
  const auto lo = hi - 1;
  return lo->second + (hi->second - lo->second) * (bytes - lo->first) / (hi->first - lo->first);
}

double CommModel::seconds(Collective c, int ranks, double bytes) const {
  if (const auto t = measured[size_t(c)].seconds(ranks, bytes)) return *t;
  return ring_seconds(c, link(c), ranks, bytes);
}

const Link& CommModel::link(Collective c) const {
  switch (c) {
    case Collective::AllReduce: return all_reduce;
    case Collective::AllGather: return all_gather;
    case Collective::ReduceScatter: return reduce_scatter;
  }
  return all_reduce;
}

CommModel comm_model_from_links(const Json& links, const std::string& id) {
  const auto& table = links.value("links", Json::object());
  if (!table.contains(id)) {
    std::string ids;
    for (const auto& [k, v] : table.items()) ids += (ids.empty() ? "" : ", ") + k;
    throw ConfigError("--link: \"" + id + "\" is not in links.json (" + ids + ")");
  }
  const auto& e = table.at(id);
  Link l;
  l.name = e.value("name", id);
  l.latency_s = e.value("latency_us", 0.0) * 1e-6;
  double bw = e.value("bandwidth_GBps_per_direction", 0.0) * 1e9;
  std::string eff;
  if (e.contains("assumed_efficiency") && e["assumed_efficiency"].is_object()) {
    const double f = e["assumed_efficiency"].value("value", 1.0);
    bw *= f;
    char buf[64];
    std::snprintf(buf, sizeof buf, " x %.2f achieved", f);
    eff = buf;
  }
  if (!(bw > 0)) throw ConfigError("links.json: \"" + id + "\" has no bandwidth");
  l.bytes_per_s = bw;
  char note[256];
  std::snprintf(note, sizeof note, "%s: %.3g GB/s per direction%s, %.2g us a hop (links.json)",
                l.name.c_str(), e.value("bandwidth_GBps_per_direction", 0.0), eff.c_str(),
                l.latency_s * 1e6);
  l.note = note;
  CommModel m;
  m.all_reduce = m.all_gather = m.reduce_scatter = l;
  m.overlaps_compute = true;
  m.native_reduce_scatter = true;
  m.bf16_reductions = true;
  m.description = "NCCL-style rings over " + l.note;
  return m;
}

CommModel comm_model_from_calibration(const Json& comm, const std::string& file) {
  if (!comm.is_object() || !comm.contains("collectives")) {
    throw ConfigError(file + ": no \"comm\" calibration (run `accel-bench calibrate --comm`)");
  }
  const int ranks = comm.value("ranks", 0);
  const std::string backend = comm.value("backend", "gloo");
  CommModel m;
  for (const char* name : {"all_reduce", "all_gather", "reduce_scatter"}) {
    const auto& c = comm["collectives"].value(name, Json());
    if (!c.is_object()) throw ConfigError(file + ": comm.collectives." + name + " is missing");
    // The measured points are the calibration; the fit is refitted from them
    // (so a better fit applies to files measured before it), the stored one
    // used where there are none.
    AlphaBeta f{c.value("alpha_s", 0.0), c.value("beta_s_per_byte", 0.0)};
    std::vector<std::pair<double, double>> pts;
    for (const auto& p : c.value("points", Json::array())) {
      if (p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number()) {
        pts.emplace_back(p[0].get<double>(), p[1].get<double>());
      }
    }
    if (pts.size() >= 2) f = fit_alpha_beta(pts);
    const auto kind = collective_from_name(name);
    Link l = link_from_fit(kind, f, ranks, backend + " " + name);
    m.measured[size_t(kind)] = MeasuredCollective::from_points(ranks, pts);
    char note[200];
    std::snprintf(note, sizeof note, "%s fitted on %d ranks: %.1f us + %.3g GB/s", name, ranks,
                  f.alpha_s * 1e6, f.beta_s_per_byte > 0 ? 1e-9 / f.beta_s_per_byte : 0.0);
    l.note = note;
    (kind == Collective::AllReduce    ? m.all_reduce
     : kind == Collective::AllGather ? m.all_gather
                                      : m.reduce_scatter) = l;
  }
  const Json co = comm.value("colocation", Json());
  if (co.is_object()) {
    m.colocation.ranks = co.value("ranks", 0);
    m.colocation.compute = co.value("compute", 1.0);
    m.colocation.memory = co.value("memory", 1.0);
    const Json sec = co.value("seconds", Json::object());
    const double alone = sec.is_object() ? sec.value("stream_alone", 0.0) : 0.0;
    const double bytes = co.value("stream_bytes", 0.0);
    if (alone > 0 && bytes > 0) m.colocation.stream_bytes_per_s = bytes / alone;
    if (m.colocation.ranks < 2 || !(m.colocation.compute > 0) || !(m.colocation.memory > 0)) {
      throw ConfigError(file + ": comm.colocation needs ranks >= 2 and positive compute and memory factors");
    }
  }
  const bool gloo = backend == "gloo";
  m.overlaps_compute = !gloo;
  m.native_reduce_scatter = !gloo;
  m.bf16_reductions = !gloo;
  m.description = backend + " collectives calibrated on this machine (" + file + ", " +
                  std::to_string(ranks) + " ranks of " +
                  std::to_string(comm.value("threads_per_rank", 1)) + " thread(s))";
  const auto& sizes = m.measured[size_t(Collective::AllReduce)].envelope;
  if (!sizes.empty()) {
    m.description += ": at " + std::to_string(ranks) + " ranks and " + format_bytes(sizes.front().first) + " to " +
                     format_bytes(sizes.back().first) + " their measured times (linear between sizes, no size slower than a "
                     "larger one), the fitted alpha-beta rings elsewhere";
  } else {
    m.description += ", the fitted alpha-beta rings";
  }
  return m;
}

}  // namespace accel::machine
