// Text data: the CSV and bzip2 readers, the real Rotten Tomatoes snippets
// split by movie, an aclImdb tree and CSV files the tests write, the token
// collator's padding and masks, and errors that name file and line.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <bzlib.h>

#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "accel/config/run_config.h"
#include "accel/data/catalog.h"
#include "accel/data/dataset.h"
#include "accel/data/loader.h"
#include "accel/util/errors.h"
#include "accel/data/text_files.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::data;

namespace {

using accel_test::TempDir;

std::string bz2(const std::string& text) {
  std::string out(text.size() + text.size() / 100 + 700, '\0');
  unsigned len = unsigned(out.size());
  REQUIRE(BZ2_bzBuffToBuffCompress(out.data(), &len, const_cast<char*>(text.data()),
                                   unsigned(text.size()), 9, 0, 0) == BZ_OK);
  out.resize(len);
  return out;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

template <typename E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("no error");
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

config::DataConfig text_cfg(const std::string& dataset) {
  config::DataConfig c;
  c.dataset = dataset;
  return c;
}

std::vector<int64_t> to_vec(const torch::Tensor& t) {
  auto c = t.contiguous().to(torch::kLong);
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace

TEST_CASE("text data: the CSV parser takes quoted commas, doubled quotes and line breaks, and names bad lines") {
  using accel::data::detail::parse_csv;
  const auto rows = parse_csv("a,b,c\n1,\"x, y\",\"say \"\"hi\"\"\"\r\n2,\"two\nlines\",z\n\n3,,\n", "f.csv");
  REQUIRE(rows.size() == 4);
  CHECK(rows[1].fields == std::vector<std::string>{"1", "x, y", "say \"hi\""});
  CHECK(rows[2].fields == std::vector<std::string>{"2", "two\nlines", "z"});
  CHECK(rows[2].line == 3);
  CHECK(rows[3].line == 6);  // after the record with a line break and the blank line
  CHECK(rows[3].fields == std::vector<std::string>{"3", "", ""});
  CHECK(has(error_of<DataError>([] { parse_csv("a\n\"open\n", "f.csv"); }), "f.csv:2: unterminated"));
  CHECK(has(error_of<DataError>([] { parse_csv("a\n\"x\"y\n", "f.csv"); }), "f.csv:2: unexpected character"));
}

TEST_CASE("text data: bzip2 files are read to their end and a cut or altered one is an error naming it") {
  TempDir dir;
  const std::string text = "category,text\nfresh,good\n";
  write_bytes(dir / "ok.bz2", bz2(text));
  CHECK(accel::data::detail::read_file_bytes(dir / "ok.bz2") == text);
  write_bytes(dir / "two.bz2", bz2("one,") + bz2("two"));  // concatenated streams, as pbzip2 writes
  CHECK(accel::data::detail::read_file_bytes(dir / "two.bz2") == "one,two");
  std::string packed = bz2(std::string(5000, 'x') + "tail");
  write_bytes(dir / "cut.bz2", packed.substr(0, packed.size() - 10));
  CHECK(has(error_of<DataError>([&] { accel::data::detail::read_file_bytes(dir / "cut.bz2"); }), "cut.bz2"));
  packed[packed.size() / 2] ^= 0x5a;
  write_bytes(dir / "bad.bz2", packed);
  CHECK(has(error_of<DataError>([&] { accel::data::detail::read_file_bytes(dir / "bad.bz2"); }), "bad.bz2"));
  write_bytes(dir / "plain.csv", text);
  CHECK(accel::data::detail::read_file_bytes(dir / "plain.csv") == text);
}

TEST_CASE("text data: the real Rotten Tomatoes snippets are 12808 reviews split by movie, no movie in two splits") {
  auto cfg = text_cfg("rotten-tomatoes");
  REQUIRE_NOTHROW(check_data_files(cfg));  // scripts/setup.sh installs them
  const auto sp = load_splits(cfg, 123);
  const int64_t total = sp.train.size() + sp.val.size() + sp.test.size();
  CHECK(total == 12808);
  const auto& counts = sp.info["class_counts"];
  int64_t rotten = 0, fresh = 0;
  for (const char* s : {"train", "val", "test"}) {
    rotten += counts[s][0].get<int64_t>();
    fresh += counts[s][1].get<int64_t>();
  }
  CHECK(rotten == 5405);
  CHECK(fresh == 7403);
  CHECK(sp.train.class_names == std::vector<std::string>{"rotten", "fresh"});
  CHECK(sp.info["plot_rows_left_out"] == 1097);
  CHECK(sp.info["movies"].get<int>() > 500);
  const auto& per = sp.info["movies_per_split"];
  CHECK(per["train"].get<int>() + per["val"].get<int>() + per["test"].get<int>() == sp.info["movies"].get<int>());
  CHECK(double(sp.test.size()) / double(total) == doctest::Approx(0.2).epsilon(0.05));
  // Tokenized once, with the recorded vocab; ids within it, [CLS] first.
  CHECK(sp.info["vocab_sha256"].get<std::string>().size() == 64);
  CHECK(sp.info["max_token_id"].get<int64_t>() < 30522);
  CHECK(sp.train.column("input_ids")[0][0].item<int>() == 101);
  CHECK(sp.train.column("length").max().item<int>() <= 128);
  // The same split for another train.seed: data.split_seed decides it.
  CHECK(load_splits(cfg, 7).test.size() == sp.test.size());
  cfg.split_seed = 124;
  CHECK(load_splits(cfg, 123).test.size() != sp.test.size());
}

TEST_CASE("token stream: data.train_subset keeps the same training documents whether they are packed or padded") {
  auto cfg = text_cfg("rotten-tomatoes-lm");
  REQUIRE_NOTHROW(check_data_files(cfg));
  cfg.max_length = 64;
  cfg.train_subset = 1000;
  cfg.packing = "documents";
  const auto padded = load_splits(cfg, 123);
  cfg.packing = "packed";
  const auto packed = load_splits(cfg, 123);
  const auto& a = padded.info["token_streams"]["train"];
  const auto& b = packed.info["token_streams"]["train"];
  CHECK(a["documents"] == 1000);
  CHECK(b["documents"] == 1000);
  // The same text: the padded rows' tokens (with what was cut) are the packed stream's.
  // (consecutive windows share their edge token).
  CHECK(a["tokens"].get<int64_t>() + a["dropped_tokens"].get<int64_t>() ==
        b["tokens"].get<int64_t>() + b["dropped_tokens"].get<int64_t>() - (b["windows"].get<int64_t>() - 1));
  CHECK(padded.train.size() == 1000);                // a document a row
  CHECK(packed.train.size() < padded.train.size());  // full windows, fewer rows
  // Another train.seed keeps the same documents (data.split_seed decides them); validation is never cut.
  CHECK(load_splits(cfg, 7).info["token_streams"]["train"]["tokens"] == b["tokens"]);
  CHECK(packed.info["token_streams"]["val"] == load_splits([&] {
          auto all = cfg;
          all.train_subset = 0;
          return all;
        }(), 123).info["token_streams"]["val"]);
}

TEST_CASE("text data: an aclImdb tree is pooled and split as the blog's 35k/5k/10k, neg 0 and pos 1") {
  TempDir dir;
  for (int i = 0; i < 40; ++i) {
    const std::string split = i < 20 ? "train" : "test";
    const std::string pol = i % 2 ? "pos" : "neg";
    std::ofstream(fs::path(dir.write("aclImdb/" + split + "/" + pol + "/" + std::to_string(i) + "_7.txt", ""))) <<
        (i % 2 ? "A wonderful, moving film." : "Dull and far too long.") << " Review " << i << ".";
  }
  auto cfg = text_cfg("imdb");
  cfg.root = dir.path.string();  // its parent: aclImdb/ is found below it
  cfg.val_fraction = 0.125;
  const auto sp = load_splits(cfg, 123);
  CHECK(sp.test.size() == 8);   // 20% of 40
  CHECK(sp.val.size() == 4);    // 12.5% of the other 32
  CHECK(sp.train.size() == 28);
  CHECK(sp.train.class_names == std::vector<std::string>{"neg", "pos"});
  cfg.root = (dir / "missing").string();
  CHECK(has(error_of<ConfigError>([&] { load_splits(cfg, 1); }), "data.root: missing file"));
}

TEST_CASE("text data: text-csv maps label names in sorted order and names a bad row's file and line") {
  TempDir dir;
  const auto train = dir.write("train.csv", "review,stars\n\"Great, fun\",good\nBoring,bad\nOkay,meh\nFine,good\nMeh,meh\n");
  const auto test = dir.write("test.csv", "review,stars\nLovely,good\nAwful,bad\n");
  auto cfg = text_cfg("text-csv");
  cfg.train_file = train.string();
  cfg.test_file = test.string();
  cfg.text_column = "review";
  cfg.label_column = "stars";
  cfg.val_fraction = 0.2;
  const auto sp = load_splits(cfg, 1);
  CHECK(sp.train.class_names == std::vector<std::string>{"bad", "good", "meh"});
  CHECK(sp.train.size() == 4);
  CHECK(sp.val.size() == 1);  // the tail, as for images
  CHECK(to_vec(sp.test.labels) == std::vector<int64_t>{1, 0});
  const auto unknown = dir.write("unknown.csv", "review,stars\nx,good\ny,great\n");
  cfg.test_file = unknown.string();
  CHECK(has(error_of<DataError>([&] { load_splits(cfg, 1); }), "unknown.csv:3: label \"great\""));
  const auto empty = dir.write("empty.csv", "review,stars\n  ,good\n");
  cfg.test_file = empty.string();
  CHECK(has(error_of<DataError>([&] { load_splits(cfg, 1); }), "empty.csv:2: a row with no text"));
  cfg.test_file = test.string();
  cfg.text_column = "body";
  CHECK(has(error_of<DataError>([&] { load_splits(cfg, 1); }), "no column \"body\""));
  cfg.text_column = "review";
  const auto bad_utf8 = dir.write("utf8.csv", "review,stars\nok,good\n\"caf\xe9\",bad\n");
  cfg.test_file = bad_utf8.string();
  CHECK(has(error_of<DataError>([&] { load_splits(cfg, 1); }), "utf8.csv:3: invalid UTF-8"));
  cfg.test_file = (dir / "nope.csv").string();
  CHECK(has(error_of<ConfigError>([&] { check_data_files(cfg); }), "data.test_file: missing file"));
}

TEST_CASE("text data: a vocab without [PAD] is refused naming the file before anything is read") {
  TempDir dir;
  auto cfg = text_cfg("rotten-tomatoes");
  cfg.vocab = dir.write("vocab.txt", "[UNK]\n[CLS]\n[SEP]\nthe\n").string();
  CHECK(has(error_of<DataError>([&] { load_splits(cfg, 1); }), "vocab.txt: the vocab has no [PAD]"));
  cfg.vocab = (dir / "none.txt").string();
  CHECK(has(error_of<ConfigError>([&] { check_data_files(cfg); }), "data.vocab: missing file"));
}

TEST_CASE("text data: the collator pads to the batch's longest row or a fixed length, with the mask and token count") {
  const auto set = std::make_shared<const ExampleSet>(
      make_token_set({{101, 7, 102}, {101, 5, 6, 7, 8, 102}, {101, 102}}, torch::tensor({0L, 1L, 0L}), 2,
                     {"a", "b"}, 0));
  LoaderOptions o;
  o.batch_size = 3;
  o.prefetch = 0;
  Loader longest(set, o);
  const auto b = longest.next();
  REQUIRE(b.has_value());
  const auto& ids = b->inputs.at("input_ids");
  CHECK(ids.sizes() == torch::IntArrayRef({3, 6}));
  CHECK((ids.scalar_type() == torch::kLong));
  CHECK(to_vec(ids[0]) == std::vector<int64_t>{101, 7, 102, 0, 0, 0});
  CHECK(to_vec(b->inputs.at("attention_mask")[2]) == std::vector<int64_t>{1, 1, 0, 0, 0, 0});
  CHECK(b->tokens == 11);
  o.collate.pad_to = 8;
  Loader fixed(set, o);
  const auto f = fixed.next();
  CHECK(f->inputs.at("input_ids").sizes() == torch::IntArrayRef({3, 8}));
  CHECK(f->inputs.at("attention_mask").sum().item<int64_t>() == 11);
  o.collate.pad_to = 4;  // narrower than a row: an error, never a silent cut
  Loader narrow(set, o);
  CHECK_THROWS_AS(narrow.next(), std::invalid_argument);
}

TEST_CASE("text data: the synthetic token rows are deterministic and carry their class") {
  auto cfg = text_cfg("synthetic-text");
  cfg.synthetic_train = 64;
  cfg.synthetic_test = 32;
  const auto a = load_splits(cfg, 1), b = load_splits(cfg, 2);
  CHECK(torch::equal(a.train.column("input_ids"), b.train.column("input_ids")));
  CHECK(a.train.size() + a.val.size() == 64);
  // Class 1's marker ids (2050..2099) appear only in class-1 rows.
  const auto ids = a.train.column("input_ids");
  const auto marked1 = ((ids >= 2050) & (ids < 2100)).any(1);
  CHECK(torch::equal(marked1.logical_and(a.train.labels.eq(0)).any(), torch::tensor(false)));
}

TEST_CASE("token stream: packed windows predict every token after the first once and padded documents mark what has no next token") {
  using accel::data::make_token_stream_set;
  const std::vector<std::vector<int32_t>> docs = {{101, 5, 6, 102}, {101, 7, 102}, {101, 102}, {9}};
  auto rows = torch::arange(3, torch::kLong);
  // Packed, 3 tokens a window: the stream 101 5 6 102 101 7 102 101 102 9 in
  // windows of 4 that share their edge token.
  const auto packed = make_token_stream_set(docs, 3, true, 0, 200);
  REQUIRE(packed.size() == 3);
  CHECK(packed.num_classes == 200);
  CHECK(packed.kind() == "tokens");
  auto b = packed.collator->collate(packed, rows, {});
  CHECK(torch::equal(accel::data::input(b.inputs, "input_ids"),
                     torch::tensor({{101L, 5L, 6L}, {102L, 101L, 7L}, {102L, 101L, 102L}})));
  CHECK(torch::equal(b.y, torch::tensor({{5L, 6L, 102L}, {101L, 7L, 102L}, {101L, 102L, 9L}})));
  CHECK(b.inputs.count("attention_mask") == 0);  // nothing padded: no mask
  CHECK(b.tokens == 9);
  auto facts = accel::data::token_stream_facts(packed);
  CHECK(facts["packing"] == "packed");
  CHECK(facts["documents"] == 4);
  CHECK(facts["windows"] == 3);
  CHECK(facts["dropped_tokens"] == 0);
  // The loader keeps the collator's next tokens as the batch's labels.
  accel::data::LoaderOptions lo;
  lo.batch_size = 2;
  lo.prefetch = 0;
  accel::data::Loader loader(std::make_shared<const accel::data::ExampleSet>(packed), lo);
  loader.start_epoch(0);
  const auto first = loader.next();
  REQUIRE(first.has_value());
  CHECK(torch::equal(first->y, torch::tensor({{5L, 6L, 102L}, {101L, 7L, 102L}})));
  // A tail that fills no window is dropped and said.
  CHECK(accel::data::token_stream_facts(make_token_stream_set(docs, 4, true, 0, 200))["dropped_tokens"] == 1);
  // Documents, 3 tokens a row: each padded (pad id 0) and masked; a document
  // of one token has nothing to predict and is left out; a long one is cut.
  const auto documents = make_token_stream_set(docs, 3, false, 0, 200);
  REQUIRE(documents.size() == 3);
  b = documents.collator->collate(documents, rows, {});
  CHECK(torch::equal(accel::data::input(b.inputs, "input_ids"),
                     torch::tensor({{101L, 5L, 6L}, {101L, 7L, 102L}, {101L, 102L, 0L}})));
  CHECK(torch::equal(b.y, torch::tensor({{5L, 6L, 102L}, {7L, 102L, -100L}, {102L, -100L, -100L}})));
  CHECK(torch::equal(accel::data::input(b.inputs, "attention_mask"),
                     torch::tensor({{1L, 1L, 1L}, {1L, 1L, 1L}, {1L, 1L, 0L}})));
  CHECK(b.tokens == 6);
  facts = accel::data::token_stream_facts(documents);
  CHECK(facts["packing"] == "documents");
  CHECK(facts["dropped_tokens"] == 1);
  CHECK(facts["tokens"] == 4 + 3 + 2);
  const auto cut = make_token_stream_set({{101, 1, 2, 3, 4, 102}}, 3, false, 0, 200);
  CHECK(accel::data::token_stream_facts(cut)["dropped_tokens"] == 2);
  CHECK(torch::equal(cut.column("input_ids"), torch::tensor({{101, 1, 2, 3}}, torch::kInt)));
  CHECK_THROWS_AS(make_token_stream_set(docs, 0, true, 0, 200), std::invalid_argument);
}
