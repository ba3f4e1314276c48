// Subsets of any ExampleSet: rows, a class subset (remapped), and a
// balanced seeded cap. The split of a run's data is load_splits
// (datasets.cpp).
#include <algorithm>

#include "accel/data/dataset.h"
#include "accel/data/loader.h"
#include "accel/util/errors.h"

namespace accel::data {

namespace {

// An int64 index tensor owning a copy of v (from_blob alone would alias the
// vector, and an empty vector may have no storage at all).
torch::Tensor index_tensor(const std::vector<int64_t>& v) {
  if (v.empty()) return torch::empty({0}, torch::kLong);
  return torch::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())},
                          torch::kLong)
      .clone();
}

}  // namespace

ExampleSet take_rows(const ExampleSet& set, int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > set.size())
    throw std::out_of_range("take_rows: [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") is outside [0, " + std::to_string(set.size()) + ")");
  ExampleSet out = set;
  // narrow along dim 0 of a contiguous tensor is itself contiguous: no copy.
  for (auto& [name, t] : out.columns) t = t.narrow(0, begin, end - begin);
  out.labels = set.labels.narrow(0, begin, end - begin);
  return out;
}

ExampleSet select_classes(const ExampleSet& set, const std::vector<int>& classes) {
  if (classes.empty()) return set;
  const int k = set.num_classes;
  std::vector<int64_t> lut(static_cast<size_t>(std::max(k, 0)), -1);
  for (size_t i = 0; i < classes.size(); ++i) {
    const int c = classes[i];
    if (c < 0 || c >= k)
      throw ConfigError("data.classes: class " + std::to_string(c) + " is out of range (" +
                        std::to_string(k) + " classes)");
    if (lut[static_cast<size_t>(c)] >= 0)
      throw ConfigError("data.classes: class " + std::to_string(c) + " is listed twice");
    lut[static_cast<size_t>(c)] = static_cast<int64_t>(i);
  }
  const auto labels = set.labels.contiguous();
  const int64_t* lp = labels.data_ptr<int64_t>();
  std::vector<int64_t> rows, remapped;
  for (int64_t i = 0; i < set.size(); ++i) {
    const int64_t l = lp[i];
    if (l >= 0 && l < k && lut[static_cast<size_t>(l)] >= 0) {
      rows.push_back(i);
      remapped.push_back(lut[static_cast<size_t>(l)]);
    }
  }
  ExampleSet out = set.with_rows(index_tensor(rows), index_tensor(remapped),
                                 static_cast<int>(classes.size()));
  if (!set.class_names.empty()) {
    out.class_names.clear();
    for (int c : classes) out.class_names.push_back(set.class_names[static_cast<size_t>(c)]);
  }
  return out;
}

ExampleSet cap_balanced(const ExampleSet& set, int64_t cap, uint64_t seed) {
  const int64_t n = set.size();
  if (cap <= 0 || cap >= n) return set;
  const auto labels = set.labels.contiguous();
  const int64_t* lp = labels.data_ptr<int64_t>();
  int64_t k = set.num_classes;
  for (int64_t i = 0; i < n; ++i) k = std::max(k, lp[i] + 1);
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(lp[i])].push_back(i);

  // Water-filling: every class with rows left gets an equal share of what is
  // still to place, the remainder going to the first such classes; a class
  // smaller than its share gives up all its rows and the next round hands
  // the shortfall to the others. Each round saturates a class or finishes.
  std::vector<int64_t> take(static_cast<size_t>(k), 0);
  int64_t remaining = cap;
  while (remaining > 0) {
    std::vector<size_t> open;
    for (size_t c = 0; c < rows.size(); ++c)
      if (take[c] < static_cast<int64_t>(rows[c].size())) open.push_back(c);
    if (open.empty()) break;
    const auto m = static_cast<int64_t>(open.size());
    const int64_t share = remaining / m, extra = remaining % m;
    for (int64_t j = 0; j < m; ++j) {
      const size_t c = open[static_cast<size_t>(j)];
      const int64_t want = share + (j < extra ? 1 : 0);
      const int64_t give = std::min(want, static_cast<int64_t>(rows[c].size()) - take[c]);
      take[c] += give;
      remaining -= give;
    }
  }

  // Which rows of a class: a prefix of a seeded permutation of them. The
  // portable epoch_indices permutation (class id in the epoch slot) keeps the
  // choice identical across compilers and LibTorch versions.
  std::vector<int64_t> kept;
  kept.reserve(static_cast<size_t>(cap));
  for (size_t c = 0; c < rows.size(); ++c) {
    if (take[c] == 0) continue;
    const auto perm = epoch_indices(static_cast<int64_t>(rows[c].size()), true,
                                    seed ^ 0xCA9BA1A2CEDULL, static_cast<int>(c), 0, 1);
    for (int64_t j = 0; j < take[c]; ++j)
      kept.push_back(rows[c][static_cast<size_t>(perm[static_cast<size_t>(j)])]);
  }
  // Original relative order, so "the last val_fraction" stays a tail of the
  // file order as in the uncapped case.
  std::sort(kept.begin(), kept.end());
  const auto idx = index_tensor(kept);
  return set.with_rows(idx, set.labels.index_select(0, idx), set.num_classes);
}

}  // namespace accel::data
