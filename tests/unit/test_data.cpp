// Data readers, class subsets / caps / splits, epoch orders and the loader.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include "support/temp_dir.h"
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <fstream>
#include <set>

#include "accel/data/dataset.h"
#include "accel/data/loader.h"
#include "accel/util/errors.h"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::data;

namespace {

// A fresh directory under the system temp dir, removed at scope exit.
using accel_test::TempDir;

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

std::vector<uint8_t> idx_images(uint32_t n, uint32_t h, uint32_t w, uint32_t magic = 0x803) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, h);
  put_be32(b, w);
  for (uint32_t i = 0; i < n * h * w; ++i) b.push_back(static_cast<uint8_t>(i * 7 + 3));
  return b;
}

std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  put_be32(b, 0x801);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_raw(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gz(const fs::path& p, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(f);
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs f, expecting an exception of type E whose message contains every needle.
template <class E, class F>
void check_throws_with(F&& f, std::vector<std::string> needles) {
  bool thrown = false;
  try {
    f();
  } catch (const E& e) {
    thrown = true;
    const std::string msg = e.what();
    for (const auto& n : needles) CHECK_MESSAGE(msg.find(n) != std::string::npos, msg, " lacks ", n);
  }
  CHECK_MESSAGE(thrown, "expected exception");
}

// Labels cycle 0..k-1; 1x2x2 images whose first pixel is the row id (mod 256).
ExampleSet tiny_set(int64_t n, int k) {
  auto pixels = torch::zeros({n, 1, 2, 2}, torch::kUInt8);
  for (int64_t i = 0; i < n; ++i) pixels[i][0][0][0] = static_cast<int>(i % 256);
  return make_image_set(pixels, torch::arange(n, torch::kLong).remainder(k), k, {0.5F}, {0.25F});
}

std::vector<int64_t> to_vec(const torch::Tensor& t) {
  auto c = t.contiguous().to(torch::kLong);
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Labels are the row ids, so a loader's y shows exactly which rows it served.
ExampleSet id_set(int64_t n) {
  ExampleSet s = tiny_set(n, 1);
  s.labels = torch::arange(n, torch::kLong);
  s.num_classes = static_cast<int>(n);
  return s;
}

}  // namespace

TEST_CASE("data: read_idx reads raw and gzipped files alike") {
  TempDir d;
  const auto img = idx_images(5, 3, 4);
  const auto lab = idx_labels({0, 1, 2, 9, 4});
  write_raw(d.path / "img", img);
  write_raw(d.path / "lab", lab);
  write_gz(d.path / "img.gz", img);
  write_gz(d.path / "lab.gz", lab);
  const auto raw = read_idx(d.path / "img", d.path / "lab", 10);
  const auto gz = read_idx(d.path / "img.gz", d.path / "lab.gz", 10);
  for (const auto* s : {&raw, &gz}) {
    CHECK(image_pixels(*s).sizes() == torch::IntArrayRef({5, 1, 3, 4}));
    CHECK((image_pixels(*s).scalar_type() == torch::kUInt8));
    CHECK((s->labels.scalar_type() == torch::kLong));
    CHECK(to_vec(s->labels) == std::vector<int64_t>{0, 1, 2, 9, 4});
    CHECK(image_pixels(*s)[1][0][0][1].item<int>() == static_cast<uint8_t>(13 * 7 + 3));
    CHECK(s->num_classes == 10);
    CHECK(image_stats(*s).first.size() == 1);
  }
  CHECK(torch::equal(image_pixels(raw), image_pixels(gz)));
}

TEST_CASE("data: read_idx reports a truncated file as DataError naming it") {
  TempDir d;
  auto img = idx_images(5, 3, 4);
  img.resize(img.size() - 7);
  write_raw(d.path / "short-images", img);
  write_gz(d.path / "short-images.gz", img);
  write_raw(d.path / "lab", idx_labels({0, 1, 2, 3, 4}));
  for (const char* name : {"short-images", "short-images.gz"})
    check_throws_with<DataError>([&] { read_idx(d.path / name, d.path / "lab", 10); },
                                 {name, "truncated: expected 60 bytes of pixel data, got 53"});
  // A gzip stream cut off mid-way (a broken download).
  auto gz = read_all(d.path / "short-images.gz");
  write_raw(d.path / "cut.gz", std::vector<uint8_t>(gz.begin(), gz.begin() + 20));
  check_throws_with<DataError>([&] { read_idx(d.path / "cut.gz", d.path / "lab", 10); },
                               {"cut.gz", "truncated"});
  // Damaged compressed data.
  gz[12] ^= 0xFF;
  write_raw(d.path / "bad.gz", gz);
  CHECK_THROWS_AS(read_idx(d.path / "bad.gz", d.path / "lab", 10), DataError);
  // Extra bytes after the promised data.
  auto longer = idx_images(5, 3, 4);
  longer.push_back(0);
  write_raw(d.path / "long-images", longer);
  check_throws_with<DataError>([&] { read_idx(d.path / "long-images", d.path / "lab", 10); },
                               {"long-images", "after the 60 bytes"});
}

TEST_CASE("data: read_idx rejects a bad magic") {
  TempDir d;
  write_raw(d.path / "img", idx_images(2, 2, 2, 0x801));
  write_raw(d.path / "lab", idx_labels({0, 1}));
  check_throws_with<DataError>([&] { read_idx(d.path / "img", d.path / "lab", 10); },
                               {"img", "bad magic 0x00000801"});
  write_raw(d.path / "img", idx_images(2, 2, 2));
  check_throws_with<DataError>([&] { read_idx(d.path / "img", d.path / "img", 10); },
                               {"img", "bad magic 0x00000803"});
}

TEST_CASE("data: read_idx rejects mismatched image and label counts") {
  TempDir d;
  write_raw(d.path / "img", idx_images(3, 2, 2));
  write_gz(d.path / "lab.gz", idx_labels({0, 1}));
  check_throws_with<DataError>([&] { read_idx(d.path / "img", d.path / "lab.gz", 10); },
                               {"img", "lab.gz", "3 images", "2 labels"});
}

TEST_CASE("data: read_idx rejects a label out of range") {
  TempDir d;
  write_raw(d.path / "img", idx_images(3, 2, 2));
  write_raw(d.path / "lab", idx_labels({0, 10, 1}));
  check_throws_with<DataError>([&] { read_idx(d.path / "img", d.path / "lab", 10); },
                               {"lab", "label 10 at index 1"});
}

TEST_CASE("data: read_cifar10 reads records as CHW and concatenates files") {
  TempDir d;
  std::vector<uint8_t> a, b;
  for (int r = 0; r < 2; ++r) {
    a.push_back(static_cast<uint8_t>(r + 3));
    for (int k = 0; k < 3072; ++k) a.push_back(static_cast<uint8_t>((k / 1024) * 10 + r));
  }
  b.push_back(9);
  for (int k = 0; k < 3072; ++k) b.push_back(static_cast<uint8_t>(k % 251));
  write_raw(d.path / "data_batch_1.bin", a);
  write_raw(d.path / "test_batch.bin", b);
  const auto s = read_cifar10({d.path / "data_batch_1.bin", d.path / "test_batch.bin"});
  CHECK(image_pixels(s).sizes() == torch::IntArrayRef({3, 3, 32, 32}));
  CHECK(to_vec(s.labels) == std::vector<int64_t>{3, 4, 9});
  CHECK(image_pixels(s)[1][2][31][31].item<int>() == 21);  // blue plane of record 1
  CHECK(image_pixels(s)[0][1][0][0].item<int>() == 10);
  CHECK(image_pixels(s)[2][0][1][0].item<int>() == 32);  // row-major: (1,0) is byte 32
  CHECK(image_stats(s).first.size() == 3);
  CHECK(image_stats(s).second.size() == 3);
}

TEST_CASE("data: read_cifar10 rejects a wrong file size and a label out of range") {
  TempDir d;
  write_raw(d.path / "data_batch_1.bin", std::vector<uint8_t>(3073 * 2 - 1, 0));
  check_throws_with<DataError>([&] { read_cifar10({d.path / "data_batch_1.bin"}); },
                               {"data_batch_1.bin", "multiple of 3073"});
  std::vector<uint8_t> rec(3073, 0);
  rec[0] = 10;
  write_raw(d.path / "test_batch.bin", rec);
  check_throws_with<DataError>([&] { read_cifar10({d.path / "test_batch.bin"}); },
                               {"test_batch.bin", "label 10"});
}

TEST_CASE("data: a missing data file is a ConfigError naming it") {
  TempDir d;
  config::DataConfig cfg;
  cfg.dataset = "fashion-mnist";
  cfg.root = d.path.string();
  const std::string want = (d.path / "train-images-idx3-ubyte.gz").string();
  check_throws_with<ConfigError>([&] { check_data_files(cfg); }, {"data.root: missing file " + want});
  check_throws_with<ConfigError>([&] { load_splits(cfg, 1); }, {"data.root: missing file " + want});
  check_throws_with<ConfigError>([&] { read_idx(want, want, 10); }, {"missing file", want});

  // An unpacked copy is accepted in place of the .gz.
  write_raw(d.path / "train-images-idx3-ubyte", idx_images(1, 1, 1));
  const auto files = required_files(cfg);
  REQUIRE(files.size() == 4);
  CHECK(files[0] == d.path / "train-images-idx3-ubyte");
  CHECK(files[1] == d.path / "train-labels-idx1-ubyte.gz");
  check_throws_with<ConfigError>([&] { check_data_files(cfg); }, {"train-labels-idx1-ubyte.gz"});

  cfg.dataset = "cifar10";
  check_throws_with<ConfigError>([&] { check_data_files(cfg); },
                                 {"data.root: missing file", "cifar-10-batches-bin", "data_batch_1.bin"});
  // root itself holding the batches is accepted too.
  write_raw(d.path / "data_batch_1.bin", {});
  CHECK(required_files(cfg).front() == d.path / "data_batch_1.bin");
  CHECK(required_files(cfg).back() == d.path / "test_batch.bin");
  fs::create_directories(d.path / "cifar-10-batches-bin");
  CHECK(required_files(cfg).front() == d.path / "cifar-10-batches-bin" / "data_batch_1.bin");

  cfg.dataset = "synthetic";
  CHECK(required_files(cfg).empty());
  CHECK_NOTHROW(check_data_files(cfg));
  CHECK(default_root("fashion-mnist") == "/usr/share/datasets/fashion-mnist");
  cfg.dataset = "imagenet";
  CHECK_THROWS_AS(check_data_files(cfg), ConfigError);
}

TEST_CASE("data: select_classes keeps the given classes remapped in the order given") {
  const auto s = tiny_set(40, 10);
  const auto sel = select_classes(s, {5, 6, 7, 8, 9});
  CHECK(sel.num_classes == 5);
  CHECK(sel.size() == 20);
  const auto labels = to_vec(sel.labels);
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t row = image_pixels(sel)[static_cast<int64_t>(i)][0][0][0].item<int>();
    CHECK(labels[i] == row % 10 - 5);  // 5->0, ..., 9->4
  }
  const auto rev = select_classes(s, {9, 2});
  CHECK(to_vec(rev.labels) == std::vector<int64_t>{1, 0, 1, 0, 1, 0, 1, 0});
  CHECK(select_classes(s, {}).size() == 40);
  CHECK_THROWS_AS(select_classes(s, {3, 3}), ConfigError);
  check_throws_with<ConfigError>([&] { select_classes(s, {12}); }, {"data.classes: class 12 is out of range"});

  config::DataConfig cfg;
  cfg.root = "/nonexistent";  // the option is checked before the files
  cfg.classes = {5, 12};
  check_throws_with<ConfigError>([&] { load_splits(cfg, 0); },
                                 {"data.classes: class 12 is out of range for fashion-mnist (10 classes)"});
}

TEST_CASE("data: cap_balanced is balanced per class and ordered and seeded") {
  const auto s = tiny_set(200, 4);  // 50 rows per class
  const auto c = cap_balanced(s, 42, 7);
  REQUIRE(c.size() == 42);
  auto counts = torch::bincount(c.labels, {}, 4);
  CHECK(to_vec(counts) == std::vector<int64_t>{11, 11, 10, 10});  // remainder to the first classes
  const auto rows = to_vec(image_pixels(c).select(1, 0).select(1, 0).select(1, 0));
  CHECK(std::is_sorted(rows.begin(), rows.end()));
  CHECK(torch::equal(image_pixels(c), image_pixels(cap_balanced(s, 42, 7))));
  CHECK_FALSE(torch::equal(image_pixels(c), image_pixels(cap_balanced(s, 42, 8))));
  CHECK(cap_balanced(s, 0, 7).size() == 200);
  CHECK(cap_balanced(s, 500, 7).size() == 200);

  // A class with fewer rows than its share gives the rest to the others.
  std::vector<int64_t> lab;
  for (int i = 0; i < 42; ++i) lab.push_back(i < 30 ? i % 2 : 2);  // 15, 15, 12 rows
  ExampleSet skew = tiny_set(42, 3);
  skew.labels = torch::tensor(lab);
  CHECK(to_vec(torch::bincount(cap_balanced(skew, 39, 1).labels, {}, 3)) ==
        std::vector<int64_t>{14, 13, 12});
  CHECK(to_vec(torch::bincount(cap_balanced(skew, 41, 1).labels, {}, 3)) ==
        std::vector<int64_t>{15, 14, 12});
}

TEST_CASE("data: load_splits takes the tail of train as validation") {
  config::DataConfig cfg;
  cfg.dataset = "synthetic";
  cfg.synthetic_train = 1000;
  cfg.synthetic_test = 100;
  cfg.val_fraction = 0.1;
  const auto sp = load_splits(cfg, 3);
  CHECK(sp.train.size() == 900);
  CHECK(sp.val.size() == 100);
  CHECK(sp.test.size() == 100);
  CHECK(image_pixels(sp.train).sizes() == torch::IntArrayRef({900, 1, 28, 28}));
  CHECK(sp.class_ids.size() == 10);
  cfg.val_fraction = 0.0;
  const auto all = load_splits(cfg, 3);
  CHECK(all.val.size() == 0);
  CHECK(torch::equal(image_pixels(all.train).narrow(0, 900, 100), image_pixels(sp.val)));
  CHECK(torch::equal(image_pixels(all.train).narrow(0, 0, 900), image_pixels(sp.train)));
  CHECK(image_stats(sp.test) == image_stats(sp.train));

  cfg.val_fraction = 0.1;
  cfg.classes = {5, 6, 7, 8, 9};
  cfg.train_subset = 200;
  const auto sub = load_splits(cfg, 3);
  CHECK(sub.train.size() + sub.val.size() == 200);
  CHECK(sub.val.size() == 20);
  CHECK(sub.train.num_classes == 5);
  CHECK(sub.test.num_classes == 5);
  CHECK(sub.class_ids == std::vector<int>{5, 6, 7, 8, 9});
  CHECK(sub.train.labels.max().item<int64_t>() == 4);
  CHECK(sub.test.size() == 50);
}

TEST_CASE("data: make_synthetic is deterministic and its classes are learnable") {
  const auto a = make_synthetic(300, 1, 28, 10, 1);
  CHECK(torch::equal(image_pixels(a), image_pixels(make_synthetic(300, 1, 28, 10, 1))));
  CHECK_FALSE(torch::equal(image_pixels(a), image_pixels(make_synthetic(300, 1, 28, 10, 2))));
  CHECK(image_pixels(make_synthetic(4, 3, 8, 2, 0)).sizes() == torch::IntArrayRef({4, 3, 8, 8}));
  // Nearest class mean (from one seed) classifies another seed's images.
  const auto x = image_pixels(a).to(torch::kFloat).flatten(1);
  std::vector<torch::Tensor> means;
  for (int c = 0; c < 10; ++c) means.push_back(x.index_select(0, torch::nonzero(a.labels.eq(c)).flatten()).mean(0));
  const auto centers = torch::stack(means);
  const auto b = make_synthetic(200, 1, 28, 10, 99);
  const auto pred = torch::cdist(image_pixels(b).to(torch::kFloat).flatten(1), centers).argmin(1);
  CHECK(pred.eq(b.labels).to(torch::kFloat).mean().item<float>() > 0.95F);
}

TEST_CASE("data: epoch_indices is a seeded permutation that changes per epoch") {
  const auto e0 = epoch_indices(100, true, 5, 0, 0, 1);
  CHECK(e0 == epoch_indices(100, true, 5, 0, 0, 1));
  CHECK(e0 != epoch_indices(100, true, 5, 1, 0, 1));
  CHECK(e0 != epoch_indices(100, true, 6, 0, 0, 1));
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> ident(100);
  std::iota(ident.begin(), ident.end(), 0);
  CHECK(sorted == ident);
  CHECK(e0 != ident);
  CHECK(epoch_indices(100, false, 5, 3, 0, 1) == ident);
  CHECK(epoch_indices(0, true, 5, 0, 0, 1).empty());
  // Pinned values (cross-checked with a Python reimplementation): the order
  // must not change with compiler, standard library or LibTorch.
  CHECK(epoch_indices(8, true, 123, 0, 0, 1) == std::vector<int64_t>{2, 1, 4, 0, 6, 5, 7, 3});
  CHECK(epoch_indices(20, true, 7, 3, 0, 1) ==
        std::vector<int64_t>{3, 9, 1, 19, 2, 11, 10, 0, 15, 7, 14, 8, 13, 6, 5, 12, 17, 18, 4, 16});
}

TEST_CASE("data: epoch_indices shards are disjoint and cover the set for world 2") {
  const auto r0 = epoch_indices(10, true, 1, 2, 0, 2), r1 = epoch_indices(10, true, 1, 2, 1, 2);
  CHECK(r0.size() == 5);
  CHECK(r1.size() == 5);
  std::set<int64_t> u(r0.begin(), r0.end());
  for (auto i : r1) CHECK(u.insert(i).second);  // disjoint
  CHECK(u.size() == 10);
  // Odd: padded by wrapping to 12, both ranks get 6, one index appears twice.
  const auto o0 = epoch_indices(11, true, 1, 0, 0, 2), o1 = epoch_indices(11, true, 1, 0, 1, 2);
  CHECK(o0.size() == 6);
  CHECK(o1.size() == 6);
  std::multiset<int64_t> m(o0.begin(), o0.end());
  m.insert(o1.begin(), o1.end());
  CHECK(std::set<int64_t>(m.begin(), m.end()).size() == 11);
  const auto full = epoch_indices(11, true, 1, 0, 0, 1);
  CHECK(o1.back() == full.front());  // the padding repeats the first index
  CHECK(o0.front() == full[0]);
  CHECK(o1.front() == full[1]);
  CHECK_THROWS(epoch_indices(10, true, 1, 0, 2, 2));
}

TEST_CASE("data: Loader num_batches honours drop_last and limit_batches") {
  auto s = std::make_shared<const ExampleSet>(id_set(10));
  LoaderOptions o;
  o.batch_size = 4;
  o.prefetch = 0;
  CHECK(Loader(s, o).num_batches() == 3);
  CHECK(Loader(s, o).num_samples() == 10);
  o.drop_last = true;
  CHECK(Loader(s, o).num_batches() == 2);
  CHECK(Loader(s, o).num_samples() == 8);
  o.limit_batches = 1;
  CHECK(Loader(s, o).num_batches() == 1);
  CHECK(Loader(s, o).num_samples() == 4);
  o.drop_last = false;
  o.limit_batches = 0;
  o.world_size = 3;
  o.rank = 2;
  CHECK(Loader(s, o).num_samples() == 4);
  CHECK(Loader(s, o).num_batches() == 1);
  Loader l(s, o);
  int batches = 0;
  l.start_epoch(0);
  while (auto b = l.next()) {
    ++batches;
    CHECK(b->inputs.at("pixels").size(0) == 4);
  }
  CHECK(batches == 1);
}

TEST_CASE("data: pass_shape counts the batches and real samples a pass of every rank yields") {
  // Against the Loader itself: every rank's batches, their valid rows summed.
  for (int64_t rows : {1, 7, 10, 37}) {
    for (int64_t bs : {1, 4, 64}) {
      for (bool drop_last : {false, true}) {
        for (int64_t limit : {0, 1, 2}) {
          for (int world : {1, 2, 3}) {
            auto s = std::make_shared<const ExampleSet>(id_set(rows));
            int64_t real = 0, batches = -1;
            for (int rank = 0; rank < world; ++rank) {
              LoaderOptions o;
              o.batch_size = bs;
              o.drop_last = drop_last;
              o.limit_batches = limit;
              o.prefetch = 0;
              o.world_size = world;
              o.rank = rank;
              Loader l(s, o);
              l.start_epoch(0);
              int64_t n = 0;
              while (auto b = l.next()) {
                real += b->valid;
                ++n;
              }
              if (rank == 0) batches = n;
              CHECK(n == batches);  // every rank runs as many
            }
            const auto shape = pass_shape(rows, bs, drop_last, limit, world);
            INFO(rows << " rows, batch " << bs << ", drop_last " << drop_last << ", limit "
                      << limit << ", " << world << " ranks");
            CHECK(shape.batches == batches);
            if (!drop_last) CHECK(shape.real_samples == real);
          }
        }
      }
    }
  }
  CHECK(pass_shape(0, 4, false, 0, 2).batches == 0);
  CHECK(pass_shape(0, 4, false, 0, 2).real_samples == 0);
}

TEST_CASE("data: Loader yields every sample once per epoch reproducibly") {
  auto s = std::make_shared<const ExampleSet>(id_set(37));
  for (int prefetch : {0, 1, 3}) {
    LoaderOptions o;
    o.batch_size = 5;
    o.shuffle = true;
    o.seed = 11;
    o.prefetch = prefetch;
    Loader l(s, o);
    std::vector<int64_t> first;
    for (int epoch = 0; epoch < 2; ++epoch) {
      l.start_epoch(epoch);
      std::vector<int64_t> seen;
      int64_t n = 0;
      while (auto b = l.next()) {
        CHECK((b->inputs.at("pixels").scalar_type() == torch::kFloat));
        for (auto v : to_vec(b->y)) seen.push_back(v);
        ++n;
      }
      CHECK(n == l.num_batches());
      CHECK(seen == epoch_indices(37, true, 11, epoch, 0, 1));
      if (epoch == 0) first = seen;
      else CHECK(seen != first);
      CHECK_FALSE(l.next().has_value());
    }
  }
}

TEST_CASE("data: Loader with prefetch gives the same batches as synchronous") {
  auto s = std::make_shared<const ExampleSet>(make_synthetic(50, 1, 8, 3, 4));
  LoaderOptions o;
  o.batch_size = 8;
  o.shuffle = true;
  o.seed = 2;
  o.collate.resize = 12;
  auto collect = [&](int prefetch) {
    o.prefetch = prefetch;
    Loader l(s, o);
    l.start_epoch(1);
    std::vector<Batch> out;
    while (auto b = l.next()) out.push_back(*b);
    return out;
  };
  const auto sync = collect(0), pre = collect(2);
  REQUIRE(sync.size() == pre.size());
  CHECK(sync.size() == 7);
  for (size_t i = 0; i < sync.size(); ++i) {
    CHECK(torch::equal(sync[i].inputs.at("pixels"), pre[i].inputs.at("pixels")));
    CHECK(torch::equal(sync[i].y, pre[i].y));
  }
  // A restart mid-epoch begins the epoch again; the old producer is joined.
  o.prefetch = 2;
  Loader l(s, o);
  l.start_epoch(1);
  (void)l.next();
  l.start_epoch(1);
  std::vector<Batch> again;
  while (auto b = l.next()) again.push_back(*b);
  REQUIRE(again.size() == sync.size());
  CHECK(torch::equal(again.front().inputs.at("pixels"), sync.front().inputs.at("pixels")));
  // Destroying a loader with a producer still waiting must not hang.
  { Loader busy(s, o); busy.start_epoch(0); }
}

TEST_CASE("data: Loader rethrows a producer error from next()") {
  const ExampleSet ok = id_set(10);
  // two channel means for one channel: transform fails
  const ExampleSet bad = make_image_set(image_pixels(ok), ok.labels, ok.num_classes, {0.1F, 0.2F},
                                        {1.0F, 1.0F});
  auto s = std::make_shared<const ExampleSet>(bad);
  for (int prefetch : {0, 2}) {
    LoaderOptions o;
    o.batch_size = 3;
    o.prefetch = prefetch;
    Loader l(s, o);
    l.start_epoch(0);
    CHECK_THROWS_AS(l.next(), std::invalid_argument);
    CHECK_THROWS_AS(l.next(), std::invalid_argument);
    l.start_epoch(1);  // restarting after a failure is clean
  }
}

TEST_CASE("data: transform_images converts and resizes 28->56 and normalises") {
  auto u8 = torch::randint(0, 256, {4, 1, 28, 28}, torch::kLong).to(torch::kUInt8);
  u8[0].fill_(255);
  u8[1].fill_(0);
  const auto x = transform_images(u8, {0.5F}, {0.25F}, 56, true);
  CHECK(x.sizes() == torch::IntArrayRef({4, 1, 56, 56}));
  CHECK((x.scalar_type() == torch::kFloat));
  CHECK(x[0].min().item<float>() == doctest::Approx(2.0));   // (1 - 0.5) / 0.25
  CHECK(x[1].max().item<float>() == doctest::Approx(-2.0));  // (0 - 0.5) / 0.25
  CHECK(x.min().item<float>() >= -2.0F - 1e-5F);
  CHECK(x.max().item<float>() <= 2.0F + 1e-5F);
  const auto raw = transform_images(u8, {0.5F}, {0.25F}, 0, false);
  CHECK(raw.sizes() == torch::IntArrayRef({4, 1, 28, 28}));
  CHECK(torch::allclose(raw, u8.to(torch::kFloat) / 255));
  CHECK(torch::equal(transform_images(u8, {0.5F}, {0.25F}, 28, false), raw));
  const auto c = transform_images(torch::full({2, 3, 32, 32}, 255, torch::kUInt8),
                                  {0.4914F, 0.4822F, 0.4465F}, {0.2470F, 0.2435F, 0.2616F}, 0, true);
  CHECK(c[0][2][0][0].item<float>() == doctest::Approx((1 - 0.4465) / 0.2616).epsilon(1e-4));
}

TEST_CASE("data: real Fashion-MNIST has 60000/10000 rows and classes 5-9 give 30000") {
  config::DataConfig cfg;  // fashion-mnist at its default root
  // The test command installs it (scripts/setup.sh --tests): missing is a failure.
  REQUIRE_NOTHROW(check_data_files(cfg));
  const auto f = required_files(cfg);
  const auto train = read_idx(f[0], f[1], 10);
  const auto test = read_idx(f[2], f[3], 10);
  CHECK(image_pixels(train).sizes() == torch::IntArrayRef({60000, 1, 28, 28}));
  CHECK(test.size() == 10000);
  CHECK(image_stats(train).first[0] == doctest::Approx(0.2860).epsilon(1e-3));
  CHECK(image_stats(train).second[0] == doctest::Approx(0.3530).epsilon(1e-3));
  CHECK(to_vec(torch::bincount(train.labels)) == std::vector<int64_t>(10, 6000));
  cfg.classes = {5, 6, 7, 8, 9};
  cfg.val_fraction = 0.0;
  const auto sp = load_splits(cfg, 0);
  CHECK(sp.train.size() == 30000);
  CHECK(sp.test.size() == 5000);
  CHECK(sp.train.num_classes == 5);
  cfg.train_subset = 1000;
  cfg.val_fraction = 0.1;
  const auto capped = load_splits(cfg, 0);
  CHECK(capped.train.size() == 900);
  CHECK(capped.val.size() == 100);
}
