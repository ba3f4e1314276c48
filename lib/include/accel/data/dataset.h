// Datasets in memory: one split is an ExampleSet, a table of row-aligned
// tensors (images: uint8 pixels; text: token ids and lengths) with labels,
// class names and the Collator that turns rows into a batch of named model
// inputs. Subsets, class selection, caps and splits work on any set the same
// way; only collation knows the kind of data. Which datasets exist, where
// their files are and how they are read is one table (lib/data/datasets.cpp,
// accel/data/catalog.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accel/util/json.h"
#include <torch/torch.h>

#include "accel/config/run_config.h"
#include "accel/data/batch.h"

namespace accel::data {

// How rows become model inputs; the fields a kind of data does not use are
// ignored by its collator.
struct CollateOptions {
  int resize = 0;         // images: square side (0 = keep the stored size)
  bool normalize = true;  // images: subtract the set's mean, divide by its std
  int64_t pad_to = 0;     // text: every batch this long; 0 = the batch's longest row
};

struct ExampleSet;

// One per kind of data ("image", "text"): the rows of a set -> a Batch's
// inputs (and token count). Labels and validity are the loader's.
class Collator {
 public:
  virtual ~Collator() = default;
  virtual std::string kind() const = 0;
  virtual Batch collate(const ExampleSet& set, const torch::Tensor& rows,
                        const CollateOptions& options) const = 0;
  // What result.json records of it (image statistics, pad id, ...).
  virtual nlohmann::json describe() const = 0;
};

struct ExampleSet {
  std::map<std::string, torch::Tensor> columns;  // each [N, ...], contiguous
  torch::Tensor labels;                          // int64 [N]
  int num_classes = 0;
  std::vector<std::string> class_names;  // one per class; empty = "0".."k-1"
  std::shared_ptr<const Collator> collator;

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  // std::invalid_argument naming the column and the set's columns.
  const torch::Tensor& column(const std::string& name) const;
  std::string kind() const { return collator ? collator->kind() : std::string("?"); }
  // The same columns at `rows` (int64 indices), labels replaced by `labels`.
  ExampleSet with_rows(const torch::Tensor& rows, torch::Tensor new_labels, int classes) const;
};

// ---- images ------------------------------------------------------------------------
// Column "pixels": uint8 [N, C, H, W]. The collator turns rows into float in
// [0, 1], resizes (bilinear) and normalises per channel with mean and std (in
// [0, 1] units; one value for all channels, or one per channel).
ExampleSet make_image_set(torch::Tensor pixels, torch::Tensor labels, int num_classes,
                          std::vector<float> mean, std::vector<float> std);
// The pixels of an image set, and the statistics its collator normalises with.
const torch::Tensor& image_pixels(const ExampleSet& set);
std::pair<std::vector<float>, std::vector<float>> image_stats(const ExampleSet& set);
// Per-channel mean and std of uint8 pixels [N, C, H, W] in [0, 1] units,
// exact (from byte histograms, without a float copy of the data).
std::pair<std::vector<float>, std::vector<float>> pixel_stats(const torch::Tensor& pixels);

// Turns uint8 rows into a float batch: resize (0 = keep), normalise.
torch::Tensor transform_images(const torch::Tensor& u8, const std::vector<float>& mean,
                               const std::vector<float>& std, int resize, bool normalize);

// ---- text --------------------------------------------------------------------------
// Columns "input_ids" int32 [N, L] (each row padded with pad_id after its
// length; L = the longest row) and "length" int32 [N]. The collator gives
// "input_ids" int64 [B, Lb] and "attention_mask" int64 [B, Lb] (1 for the
// row's tokens), Lb = CollateOptions::pad_to or the batch's longest row;
// Batch::tokens counts the real tokens.
ExampleSet make_token_set(const std::vector<std::vector<int32_t>>& rows, torch::Tensor labels,
                          int num_classes, std::vector<std::string> class_names, int64_t pad_id);

// ---- token streams (language modelling) ------------------------------------------
// Documents of token ids (each with its tokenizer's own markers: WordPiece's
// [CLS] ... [SEP] open and close it) as rows of seq + 1 tokens: a row's first
// seq are the inputs, its last seq the next tokens. `packed`: the documents
// concatenated in order into one stream, cut into consecutive windows (the
// tail that fills no window is dropped); else one row per document of at
// least two tokens, cut to seq + 1 and padded with pad_id. Columns
// "input_ids" int32 [N, seq + 1] and "length" int32 [N] (a row's real
// tokens); labels all 0; num_classes = vocab_size (the head is the
// vocabulary). The collator ("tokens") gives "input_ids" int64 [B, seq], an
// "attention_mask" only where a row is padded, and the next tokens as
// Batch::y int64 [B, seq], kNoTarget (batch.h) where there is none; Batch::tokens counts
// the predicted tokens.
ExampleSet make_token_stream_set(const std::vector<std::vector<int32_t>>& documents, int64_t seq,
                                 bool packed, int64_t pad_id, int64_t vocab_size);
// What a token-stream set holds: {"packing", "documents" and
// "dropped_tokens" (the packed tail; in documents, what the cut left out) of
// the documents it was made from, "windows" (its rows) and "tokens" (in its
// rows, padding aside; consecutive packed windows share one)}.
nlohmann::json token_stream_facts(const ExampleSet& set);

// --- readers (throw accel::DataError naming the file) ---------------------
// IDX (MNIST family): images idx3 ubyte + labels idx1 ubyte, gzipped or raw
// (detected from the content, not the name).
ExampleSet read_idx(const std::filesystem::path& images_file,
                    const std::filesystem::path& labels_file, int num_classes);
// CIFAR-10 binary version: records of 1 label byte + 3072 pixel bytes.
ExampleSet read_cifar10(const std::vector<std::filesystem::path>& files);
// Deterministic synthetic images whose class is learnable (for smoke tests and
// benchmarks).
ExampleSet make_synthetic(int64_t n, int channels, int size, int num_classes, uint64_t seed);

// ---- the dataset table ---------------------------------------------------------------
// Default root per dataset ("" when the dataset has none); ConfigError for
// an unknown dataset.
std::filesystem::path default_root(const std::string& dataset);
// Files a dataset needs under root; used to validate before any work.
std::vector<std::filesystem::path> required_files(const config::DataConfig& cfg);
// Throws accel::ConfigError("data.root: missing file PATH ...") naming the
// first required file that does not exist (also for an unknown dataset).
void check_data_files(const config::DataConfig& cfg);
// The tokenizer's file the dataset reads (data.vocab, or data.tokenizer's
// installed one where it is ""), or "" for a dataset that reads none.
std::filesystem::path tokenizer_file(const config::DataConfig& cfg);

struct Splits {
  ExampleSet train, val, test;
  std::vector<int> class_ids;  // original label of each remapped class
  nlohmann::json info;         // what result.json's "data" records beyond the sizes
};

// Loads the dataset of cfg, keeps cfg.classes (remapped to 0..n-1, in the order
// given), caps the training set at cfg.train_subset (seeded, balanced per
// class, after class filtering), and splits off the last cfg.val_fraction of
// the (capped) training set as validation, as cvpr2023 does.
Splits load_splits(const config::DataConfig& cfg, uint64_t seed);

// Pure helpers, exposed for tests.
ExampleSet select_classes(const ExampleSet& set, const std::vector<int>& classes);
ExampleSet cap_balanced(const ExampleSet& set, int64_t cap, uint64_t seed);
ExampleSet take_rows(const ExampleSet& set, int64_t begin, int64_t end);

}  // namespace accel::data
