// From a dataset on disk to the train / val / test sets of a run: class
// subset (remapped), balanced seeded cap, and the validation tail.
#include <cmath>
#include <numeric>

#include "accel/data/dataset.h"
#include "accel/data/loader.h"
#include "accel/util/errors.h"

namespace accel::data {

namespace {

// All three supported datasets have ten classes.
constexpr int kDatasetClasses = 10;

// The synthetic dataset is a fixed dataset like the files on disk: it does not
// depend on the run seed, so runs with different seeds see the same data and
// only the cap and the shuffling change. Train and test use different seeds
// for their noise but share the class prototypes.
constexpr uint64_t kSyntheticTrainSeed = 0x7A41ULL;
constexpr uint64_t kSyntheticTestSeed = 0x7E57ULL;
constexpr int kSyntheticSize = 28;
constexpr int kSyntheticChannels = 1;

// An int64 index tensor owning a copy of v (from_blob alone would alias the
// vector, and an empty vector may have no storage at all).
torch::Tensor index_tensor(const std::vector<int64_t>& v) {
  if (v.empty()) return torch::empty({0}, torch::kLong);
  return torch::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())},
                          torch::kLong)
      .clone();
}

void use_stats(ImageSet& set, std::vector<float> mean, std::vector<float> std) {
  set.mean = std::move(mean);
  set.std = std::move(std);
}

}  // namespace

ImageSet take_rows(const ImageSet& set, int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > set.size())
    throw std::out_of_range("take_rows: [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") is outside [0, " + std::to_string(set.size()) + ")");
  ImageSet out = set;
  // narrow along dim 0 of a contiguous tensor is itself contiguous: no copy.
  out.images = set.images.narrow(0, begin, end - begin);
  out.labels = set.labels.narrow(0, begin, end - begin);
  return out;
}

ImageSet select_classes(const ImageSet& set, const std::vector<int>& classes) {
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
  ImageSet out = set;
  out.images = set.images.index_select(0, index_tensor(rows));
  out.labels = index_tensor(remapped);
  out.num_classes = static_cast<int>(classes.size());
  return out;
}

ImageSet cap_balanced(const ImageSet& set, int64_t cap, uint64_t seed) {
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
  ImageSet out = set;
  out.images = set.images.index_select(0, idx);
  out.labels = set.labels.index_select(0, idx);
  return out;
}

Splits load_splits(const config::DataConfig& cfg, uint64_t seed) {
  // Option problems first (cheap, and they are what the user must fix), then
  // the files, then the reading.
  (void)default_root(cfg.dataset);  // rejects an unknown dataset
  std::vector<bool> seen(kDatasetClasses, false);
  for (int c : cfg.classes) {
    if (c < 0 || c >= kDatasetClasses)
      throw ConfigError("data.classes: class " + std::to_string(c) + " is out of range for " +
                        cfg.dataset + " (" + std::to_string(kDatasetClasses) + " classes)");
    if (seen[static_cast<size_t>(c)])
      throw ConfigError("data.classes: class " + std::to_string(c) + " is listed twice");
    seen[static_cast<size_t>(c)] = true;
  }
  if (!(cfg.val_fraction >= 0.0 && cfg.val_fraction < 1.0))
    throw ConfigError("data.val_fraction: must be in [0, 1), got " + std::to_string(cfg.val_fraction));
  if (cfg.train_subset < 0) throw ConfigError("data.train_subset: must be >= 0");
  check_data_files(cfg);

  ImageSet train, test;
  if (cfg.dataset == "fashion-mnist") {
    const auto f = required_files(cfg);
    train = read_idx(f[0], f[1], kDatasetClasses);
    test = read_idx(f[2], f[3], kDatasetClasses);
    // Published training-set statistics, used for every split.
    use_stats(train, {0.2860F}, {0.3530F});
    use_stats(test, {0.2860F}, {0.3530F});
  } else if (cfg.dataset == "cifar10") {
    const auto f = required_files(cfg);
    train = read_cifar10({f.begin(), f.begin() + 5});
    test = read_cifar10({f[5]});
  } else {  // synthetic: 1 x 28 x 28, 10 classes, like Fashion-MNIST
    if (cfg.synthetic_train <= 0 || cfg.synthetic_test < 0)
      throw ConfigError("data.synthetic_train must be > 0 and data.synthetic_test >= 0");
    train = make_synthetic(cfg.synthetic_train, kSyntheticChannels, kSyntheticSize,
                           kDatasetClasses, kSyntheticTrainSeed);
    test = make_synthetic(cfg.synthetic_test, kSyntheticChannels, kSyntheticSize,
                          kDatasetClasses, kSyntheticTestSeed);
    use_stats(test, train.mean, train.std);  // normalise with training statistics
  }

  train = select_classes(train, cfg.classes);
  test = select_classes(test, cfg.classes);
  train = cap_balanced(train, cfg.train_subset, seed);

  const int64_t n = train.size();
  const auto n_val = static_cast<int64_t>(std::llround(cfg.val_fraction * static_cast<double>(n)));
  if (n == 0 || n_val >= n)
    throw ConfigError("data: no training rows left (" + std::to_string(n) + " rows after class "
                      "selection and train_subset, val_fraction " + std::to_string(cfg.val_fraction) + ")");

  Splits out;
  out.train = take_rows(train, 0, n - n_val);
  out.val = take_rows(train, n - n_val, n);  // the tail, as cvpr2023's validation split
  out.test = test;
  if (cfg.classes.empty()) {
    out.class_ids.resize(kDatasetClasses);
    std::iota(out.class_ids.begin(), out.class_ids.end(), 0);
  } else {
    out.class_ids = cfg.classes;
  }
  return out;
}

}  // namespace accel::data
