// The tokenizer seam from outside the library: WordPiece is the first row
// of the registry and data.tokenizer's default; a toy byte-level row added
// in this file alone tokenizes a text-csv dataset, truncates as it says,
// is recorded in the data info and trains through the real run.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "accel/config/run_config.h"
#include "accel/data/catalog.h"
#include "accel/data/dataset.h"
#include "accel/text/tokenizers.h"
#include "accel/train/run.h"
#include "accel/util/errors.h"
#include "support/temp_dir.h"

namespace {

// Each UTF-8 byte is a token (id = byte + 3), between a begin (1) and an
// end (2) id; 0 pads. Truncation keeps the end id.
class ToyBytes final : public accel::text::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view utf8) const override {
    std::vector<int32_t> ids = {1};
    for (const unsigned char c : utf8) ids.push_back(int32_t(c) + 3);
    ids.push_back(2);
    return ids;
  }
  void truncate(std::vector<int32_t>& ids, int64_t max_length) const override {
    ids.resize(size_t(max_length - 1));
    ids.push_back(2);
  }
  int32_t pad_id() const override { return 0; }
  int32_t vocab_size() const override { return 259; }
  std::string label() const override { return "toy bytes"; }
};

struct ToyRow {
  ToyRow() {
    accel::text::add_tokenizer({"toy-bytes", "a byte a token, for this test", [](const accel::text::TokenizerSpec&) {
                                  return std::unique_ptr<accel::text::Tokenizer>(new ToyBytes);
                                }});
  }
  ~ToyRow() { accel::text::remove_tokenizer("toy-bytes"); }  // the registry is the process's
};

std::vector<int32_t> row_ids(const accel::data::ExampleSet& set, int64_t row) {
  const auto ids = set.column("input_ids")[row];
  const int64_t n = set.column("length")[row].item<int32_t>();
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(ids[i].item<int32_t>());
  return out;
}

}  // namespace

TEST_CASE("tokenizers: wordpiece is the first row and the default, and an unknown one is refused naming the rows") {
  REQUIRE_FALSE(accel::text::tokenizer_catalog().empty());
  CHECK(accel::text::tokenizer_catalog().front().name == "wordpiece");
  CHECK(accel::config::DataConfig{}.tokenizer == "wordpiece");
  const auto resolved = accel::config::load_config(std::string(ACCEL_SOURCE_DIR) + "/configs/smoke/text-tiny.json");
  CHECK(resolved["data"]["tokenizer"] == "wordpiece");
  try {
    accel::config::load_config(std::string(ACCEL_SOURCE_DIR) + "/configs/smoke/text-tiny.json",
                               {"data.tokenizer=bpe-nowhere"});
    FAIL("no error for an unknown tokenizer");
  } catch (const accel::ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("data.tokenizer") != std::string::npos);
    CHECK(what.find("wordpiece") != std::string::npos);
  }
  CHECK_THROWS_AS(accel::text::tokenizer_row("bpe-nowhere"), accel::ConfigError);
  CHECK_THROWS_AS(accel::text::add_tokenizer({"wordpiece", "again", accel::text::tokenizer_catalog().front().make}),
                  accel::ConfigError);  // one row a name
}

TEST_CASE("tokenizers: a toy byte row added in a test file alone tokenizes a text dataset and trains through the real run") {
  REQUIRE_MESSAGE(std::filesystem::exists(accel::data::default_vocab()), "the MiniLM vocab missing: run scripts/setup.sh");
  ToyRow toy;
  accel_test::TempDir tmp;
  std::string train_csv = "text,label\n";
  for (int i = 0; i < 24; ++i) train_csv += std::string(i % 2 ? "\"a fine, warm film\"" : "dull and long") + "," + (i % 2 ? "pos" : "neg") + "\n";
  const auto train = tmp.write("train.csv", train_csv);
  const auto test = tmp.write("test.csv", "text,label\nwarm,pos\n\"long, dull and very long indeed\",neg\n");
  auto resolved = accel::config::load_config(
      std::string(ACCEL_SOURCE_DIR) + "/configs/smoke/text-tiny.json",
      {"data.dataset=text-csv", "data.train_file=" + train.string(), "data.test_file=" + test.string(),
       "data.max_length=16", "data.val_fraction=0.25", "train.max_steps=4", "train.batch_size=4",
       "train.save_checkpoint=false"});
  // The schema may have taken its choices before this row was added: the
  // row is named in code, on the typed config and the record.
  auto cfg = accel::config::to_run_config(resolved);
  cfg.data.tokenizer = "toy-bytes";
  resolved["data"]["tokenizer"] = "toy-bytes";

  const auto splits = accel::data::load_splits(cfg.data, 1);
  CHECK(splits.info["tokenizer"] == "toy bytes");
  CHECK(splits.info["vocab_size"] == 259);
  CHECK(splits.info["pad_id"] == 0);
  CHECK(row_ids(splits.test, 0) == std::vector<int32_t>{1, 'w' + 3, 'a' + 3, 'r' + 3, 'm' + 3, 2});
  const auto cut = row_ids(splits.test, 1);  // 31 bytes: cut to 16 ids, the end id kept
  CHECK(cut.size() == 16);
  CHECK(cut.front() == 1);
  CHECK(cut[1] == 'l' + 3);
  CHECK(cut.back() == 2);
  CHECK(splits.info["truncated"].get<int64_t>() >= 1);

  accel::train::RunOptions opts;
  opts.out_dir = tmp.path / "run";
  const auto result = accel::train::run(cfg, resolved, opts);
  CHECK(result.status == "ok");
  CHECK(result.data["tokenizer"] == "toy bytes");
}
