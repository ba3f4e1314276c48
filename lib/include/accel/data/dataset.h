// Image datasets held in memory as uint8 tensors, the readers that fill them,
// and the split / class-subset / cap logic of a run's data section.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/config/run_config.h"

namespace accel::data {

struct ImageSet {
  torch::Tensor images;  // uint8 [N, C, H, W], contiguous
  torch::Tensor labels;  // int64 [N]
  int num_classes = 0;
  std::vector<float> mean;  // per channel, in [0,1] units, for normalisation
  std::vector<float> std;
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// --- readers (throw accel::DataError naming the file) ---------------------
// IDX (MNIST family): images idx3 ubyte + labels idx1 ubyte, gzipped or raw
// (detected from the content, not the name).
ImageSet read_idx(const std::filesystem::path& images_file,
                  const std::filesystem::path& labels_file, int num_classes);
// CIFAR-10 binary version: records of 1 label byte + 3072 pixel bytes.
ImageSet read_cifar10(const std::vector<std::filesystem::path>& files);
// Deterministic synthetic images whose class is learnable (for smoke tests and
// benchmarks).
ImageSet make_synthetic(int64_t n, int channels, int size, int num_classes,
                        uint64_t seed);

// Default root per dataset ("" when the dataset has none).
std::filesystem::path default_root(const std::string& dataset);
// Files a dataset needs under root; used to validate before any work.
std::vector<std::filesystem::path> required_files(const config::DataConfig& cfg);
// Throws accel::ConfigError("data.root: missing file PATH ...") naming the
// first required file that does not exist (also for an unknown dataset).
void check_data_files(const config::DataConfig& cfg);

struct Splits {
  ImageSet train, val, test;
  std::vector<int> class_ids;  // original label of each remapped class
};

// Loads the dataset of cfg, keeps cfg.classes (remapped to 0..n-1, in the order
// given), caps the training set at cfg.train_subset (seeded, balanced per
// class, after class filtering), and splits off the last cfg.val_fraction of
// the (capped) training set as validation, as cvpr2023 does.
Splits load_splits(const config::DataConfig& cfg, uint64_t seed);

// Pure helpers, exposed for tests.
ImageSet select_classes(const ImageSet& set, const std::vector<int>& classes);
ImageSet cap_balanced(const ImageSet& set, int64_t cap, uint64_t seed);
ImageSet take_rows(const ImageSet& set, int64_t begin, int64_t end);

}  // namespace accel::data
