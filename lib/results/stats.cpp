#include "accel/results/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstdio>
#include <random>

#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>

namespace accel::results::stats {

double normal_quantile(double p) { return boost::math::quantile(boost::math::normal_distribution<>(), p); }

double t_quantile(double p, double dof) {
  return boost::math::quantile(boost::math::students_t_distribution<>(dof), p);
}

double quantile_sorted(const std::vector<double>& s, double p) {
  if (s.empty()) return 0;
  const double h = (double(s.size()) - 1) * std::clamp(p, 0.0, 1.0);
  const auto lo = size_t(std::floor(h));
  const auto hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (h - double(lo)) * (s[hi] - s[lo]);
}

namespace {

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

// Sample variance (n - 1); 0 for fewer than 2 values.
double variance_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean_of(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return ss / double(v.size() - 1);
}

std::vector<double> logs_of(const std::vector<double>& v) {
  std::vector<double> out;
  for (double x : v) {
    if (x > 0 && std::isfinite(x)) out.push_back(std::log(x));
  }
  return out;
}

double two_sided(double confidence = kConfidence) { return 1 - (1 - confidence) / 2; }

}  // namespace

std::optional<Summary> summarize(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  Summary s;
  s.n = int(v.size());
  s.median = quantile_sorted(v, 0.5);
  s.q1 = quantile_sorted(v, 0.25);
  s.q3 = quantile_sorted(v, 0.75);
  s.iqr = s.q3 - s.q1;
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - s.median));
  std::sort(dev.begin(), dev.end());
  s.mad = quantile_sorted(dev, 0.5);
  s.mean = mean_of(v);
  s.sd = std::sqrt(variance_of(v));
  s.cv = s.mean != 0 ? s.sd / std::fabs(s.mean) : 0;
  if (s.n >= 2) {
    const double h = t_quantile(two_sided(), s.n - 1) * s.sd / std::sqrt(double(s.n));
    s.ci_low = s.mean - h;
    s.ci_high = s.mean + h;
  }
  return s;
}

std::optional<Interval> block_bootstrap_median(const std::vector<double>& series, int resamples,
                                               uint64_t seed) {
  const size_t n = series.size();
  if (n < 8 || resamples < 1) return std::nullopt;
  const size_t block = std::max<size_t>(1, size_t(std::lround(std::cbrt(double(n)))));
  const size_t starts = n - block + 1;
  std::mt19937_64 rng(seed);  // its output is fixed by the standard: the same draws everywhere
  std::vector<double> medians, draw(n);
  medians.reserve(size_t(resamples));
  for (int b = 0; b < resamples; ++b) {
    size_t filled = 0;
    while (filled < n) {
      const size_t start = size_t(rng() % starts);
      for (size_t k = 0; k < block && filled < n; ++k) draw[filled++] = series[start + k];
    }
    std::sort(draw.begin(), draw.end());
    medians.push_back(quantile_sorted(draw, 0.5));
  }
  std::sort(medians.begin(), medians.end());
  std::vector<double> sorted = series;
  std::sort(sorted.begin(), sorted.end());
  Interval out;
  out.point = quantile_sorted(sorted, 0.5);
  out.low = quantile_sorted(medians, (1 - kConfidence) / 2);
  out.high = quantile_sorted(medians, two_sided());
  out.method = "moving-block bootstrap of " + std::to_string(n) + " steps (blocks of " +
               std::to_string(block) + ", " + std::to_string(resamples) + " draws), within the run";
  return out;
}

std::optional<double> log_spread(const Sample& base, const Sample& other) {
  std::optional<double> sd;
  for (const auto* s : {&base, &other}) {
    const auto l = logs_of(s->values);
    if (l.size() >= 2) sd = std::max(sd.value_or(0.0), std::sqrt(variance_of(l)));
  }
  return sd;
}

std::optional<Interval> ratio_interval(const Sample& base, const Sample& other, double confidence) {
  const auto lb = logs_of(base.values), lo = logs_of(other.values);
  if (lb.empty() || lo.empty()) return std::nullopt;
  const double nb = double(lb.size()), no = double(lo.size());
  const double d = mean_of(lo) - mean_of(lb);
  Interval out;
  out.confidence = confidence;
  out.point = std::exp(d);
  double se = -1, q = 0;
  if (nb >= 2 && no >= 2 && base.noise_sd_log && other.noise_sd_log &&
      std::min(base.noise_runs, other.noise_runs) >= 2) {
    // The variance of one run's log, from three estimates of it: each side's
    // repeats and the machine's unchanged repeats. A side noisier than the
    // machine keeps its own (the pooled never goes below the sides').
    const double k = double(std::min(base.noise_runs, other.noise_runs));
    const double noise = std::max(*base.noise_sd_log, *other.noise_sd_log);
    const double sides = ((nb - 1) * variance_of(lb) + (no - 1) * variance_of(lo)) / (nb + no - 2);
    const double pooled = ((nb + no - 2) * sides + (k - 1) * noise * noise) / (nb + no + k - 3);
    se = std::sqrt(std::max(pooled, sides) * (1 / nb + 1 / no));
    q = t_quantile(two_sided(confidence), nb + no + k - 3);
    char m[128];
    std::snprintf(m, sizeof(m), "pooled t on logs, %d and %d runs with this machine's noise (%d repeats)",
                  int(nb), int(no), int(k));
    out.method = m;
  } else if (nb >= 2 && no >= 2) {
    const double vb = variance_of(lb) / nb, vo = variance_of(lo) / no;
    se = std::sqrt(vb + vo);
    const double den = vb * vb / (nb - 1) + vo * vo / (no - 1);
    const double dof = den > 0 ? (vb + vo) * (vb + vo) / den : nb + no - 2;
    q = t_quantile(two_sided(confidence), dof);
    char m[96];
    std::snprintf(m, sizeof(m), "Welch t on logs, %d and %d runs", int(nb), int(no));
    out.method = m;
  } else if (nb >= 2 || no >= 2) {
    const auto& many = nb >= 2 ? lb : lo;
    se = std::sqrt(variance_of(many)) * std::sqrt(1 / nb + 1 / no);
    q = t_quantile(two_sided(confidence), double(many.size()) - 1);
    out.method = "t on logs, the " + std::to_string(many.size()) + " runs' spread for both sides";
  } else if (base.noise_sd_log && other.noise_sd_log) {
    const double sd = std::max(*base.noise_sd_log, *other.noise_sd_log);
    se = sd * std::sqrt(1 / nb + 1 / no);
    const int runs = std::max(2, std::min(base.noise_runs, other.noise_runs));
    q = t_quantile(two_sided(confidence), double(runs - 1));
    out.method = !base.noise_source.empty()
                     ? "one run a side: " + base.noise_source
                     : "one run a side: this machine's measured noise (" + std::to_string(runs) + " repeats)";
  } else if (base.within_run_se_log && other.within_run_se_log) {
    se = std::sqrt(*base.within_run_se_log * *base.within_run_se_log +
                   *other.within_run_se_log * *other.within_run_se_log);
    q = normal_quantile(two_sided(confidence));
    out.method = "one run a side: within-run intervals only (no run-to-run noise)";
  }
  if (se < 0) {
    out.low = out.high = out.point;
    out.method = "one run a side: no spread";
    return out;
  }
  out.low = std::exp(d - q * se);
  out.high = std::exp(d + q * se);
  return out;
}

namespace {

// Welch's t on two sides' means (2+ values each), scaled: its standard error
// and quantile, and the method's words.
void welch_difference(const std::vector<double>& base, const std::vector<double>& other, double scale,
                      double confidence, double& se, double& q, std::string& method) {
  const double nb = double(base.size()), no = double(other.size());
  const double vb = variance_of(base) / nb, vo = variance_of(other) / no;
  se = std::sqrt(vb + vo) * scale;
  const double den = vb * vb / (nb - 1) + vo * vo / (no - 1);
  const double dof = den > 0 ? (vb + vo) * (vb + vo) / den : nb + no - 2;
  q = t_quantile(two_sided(confidence), dof);
  char m[96];
  std::snprintf(m, sizeof(m), "Welch t over seeds, %d and %d runs", int(nb), int(no));
  method = m;
}

// OUT's interval: its point +- q se, or the point alone ("no spread") where
// no standard error was found (se < 0).
Interval spread_around(Interval out, double se, double q) {
  if (se < 0) {
    out.low = out.high = out.point;
    out.method = "no spread";
    return out;
  }
  out.low = out.point - q * se;
  out.high = out.point + q * se;
  return out;
}

}  // namespace

std::optional<Interval> accuracy_difference(const std::vector<double>& base, double base_test_samples,
                                            const std::vector<double>& other, double other_test_samples,
                                            double confidence) {
  if (base.empty() || other.empty()) return std::nullopt;
  const double pb = mean_of(base), po = mean_of(other);
  const double nb = double(base.size()), no = double(other.size());
  Interval out;
  out.confidence = confidence;
  out.point = (po - pb) * 100;
  double se = -1, q = 0;
  if (nb >= 2 && no >= 2) {
    welch_difference(base, other, 100, confidence, se, q, out.method);
  } else if (base_test_samples > 0 && other_test_samples > 0) {
    // Each side's accuracy is a proportion of its test samples (over its runs).
    se = std::sqrt(pb * (1 - pb) / (base_test_samples * nb) + po * (1 - po) / (other_test_samples * no)) * 100;
    q = normal_quantile(two_sided(confidence));
    out.method = "binomial, the test sets' sampling noise";
  }
  return spread_around(out, se, q);
}

std::optional<Interval> mean_difference(const std::vector<double>& base, const std::vector<double>& other,
                                        double confidence) {
  if (base.empty() || other.empty()) return std::nullopt;
  Interval out;
  out.confidence = confidence;
  out.point = mean_of(other) - mean_of(base);
  double se = -1, q = 0;
  if (base.size() >= 2 && other.size() >= 2) welch_difference(base, other, 1, confidence, se, q, out.method);
  return spread_around(out, se, q);
}

int repeats_needed(double sd, double effect, double confidence) {
  if (!(effect > 0) || !(sd >= 0)) return 2;
  const double z = normal_quantile(two_sided(confidence)) + normal_quantile(kPower);
  const double n = 2 * z * z * sd * sd / (effect * effect);
  return std::max(2, int(std::ceil(n - 1e-9)));
}

double smallest_resolved_difference(double sd, int runs) {
  const double z = normal_quantile(two_sided()) + normal_quantile(kPower);
  return z * sd * std::sqrt(2.0 / double(std::max(runs, 1)));
}

double smallest_resolved_change(double sd_log, int runs) {
  return std::exp(smallest_resolved_difference(sd_log, runs)) - 1;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.5);
}

Verdict judge_higher_is_worse(const Interval& r, double bound) {
  const double up = 1 + bound, down = 1 / (1 + bound);
  if (r.low > up) return Verdict::worse;
  if (r.high > up) return Verdict::unresolved;
  if (r.high < down) return Verdict::better;
  return Verdict::same;
}

Verdict judge_lower_is_worse(const Interval& d, double bound) {
  if (d.high < -bound) return Verdict::worse;
  if (d.low < -bound) return Verdict::unresolved;
  if (d.low > bound) return Verdict::better;
  return Verdict::same;
}

Verdict judge_band(const Interval& d, double band) {
  if (d.low > band || d.high < -band) return Verdict::worse;
  if (d.high > band || d.low < -band) return Verdict::unresolved;
  return Verdict::same;
}

OlympicScore olympic_score(const std::vector<std::optional<double>>& runs) {
  OlympicScore o;
  o.runs = int(runs.size());
  std::vector<double> done;
  for (const auto& r : runs) {
    if (r && std::isfinite(*r)) {
      done.push_back(*r);
    } else {
      ++o.misses;
    }
  }
  if (o.runs < 3) {
    o.why = std::to_string(o.runs) + (o.runs == 1 ? " run" : " runs") +
            ": an olympic score drops the fastest and the slowest and needs at least 3";
    return o;
  }
  if (o.misses > 1) {
    o.why = std::to_string(o.misses) + " of " + std::to_string(o.runs) +
            " runs missed the target: more than one invalidates the score";
    return o;
  }
  std::sort(done.begin(), done.end());
  // The fastest dropped; the slowest too, which is the miss where there is one.
  o.kept.assign(done.begin() + 1, done.end() - (o.misses == 0 ? 1 : 0));
  double sum = 0;
  for (double v : o.kept) sum += v;
  o.mean = sum / double(o.kept.size());
  double ss = 0;
  for (double v : o.kept) ss += (v - o.mean) * (v - o.mean);
  o.sd = std::sqrt(ss / double(o.kept.size()));
  if (o.kept.size() >= 2 && o.kept.front() > 0) {
    std::vector<double> logs;
    for (double v : o.kept) logs.push_back(std::log(v));
    const auto s = summarize(logs);
    o.ci_low = std::exp(*s->ci_low);
    o.ci_high = std::exp(*s->ci_high);
  }
  o.valid = true;
  return o;
}

std::optional<ConvergenceCheck> convergence_check(const OlympicScore& reference, const OlympicScore& rung,
                                                  double resolution) {
  if (!reference.valid || !rung.valid || reference.kept.empty() || rung.kept.empty()) return std::nullopt;
  // Two kept runs between them leave the t-test no degrees of freedom.
  if (reference.kept.size() + rung.kept.size() < 3) return std::nullopt;
  ConvergenceCheck c;
  c.ref_mean = reference.mean;
  c.ref_sd = reference.sd;
  c.resolution = std::max(0.0, resolution);
  c.sd = std::sqrt(c.ref_sd * c.ref_sd + c.resolution * c.resolution / 12.0);
  c.mean = rung.mean;
  c.n_ref = int(reference.kept.size());
  c.n = int(rung.kept.size());
  const double dof = double(c.n_ref + c.n - 2);
  c.t = dof > 0 ? t_quantile(0.95, dof) : 0;
  const double half = c.sd > 0 && dof > 0 ? c.t * c.sd * std::sqrt(1.0 / c.n_ref + 1.0 / c.n) : 0;
  c.min_mean = c.ref_mean - half;
  c.max_mean = c.ref_mean + half;
  c.max_speedup = c.min_mean > 0 ? c.ref_mean / c.min_mean : 1;
  c.verdict = c.mean < c.min_mean ? "faster" : c.mean > c.max_mean ? "slower" : "same";
  c.normalisation = c.mean > 0 ? std::max(1.0, c.ref_mean / c.mean) : 1;
  return c;
}

}  // namespace accel::results::stats
