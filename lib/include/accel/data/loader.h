// A batch loader over an in-memory ExampleSet: seeded shuffling, drop_last,
// per-rank sharding (as torch's DistributedSampler), per-batch collation by
// the set's Collator (images: uint8 -> float, resize, normalise; text: pad
// to the batch's longest row or a fixed length, attention mask) and a
// background thread that prepares the next batches while the current one
// trains.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "accel/data/batch.h"
#include "accel/data/dataset.h"
#include "accel/data/pass_shape.h"

namespace accel::data {

struct LoaderOptions {
  int64_t batch_size = 16;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;        // shuffle seed; the epoch is mixed in
  int prefetch = 2;         // 0 = synchronous
  CollateOptions collate;   // how rows become inputs (resize, normalise, padding)
  int64_t limit_batches = 0;  // 0 = all
  // Batches in page-locked host memory, so the copy to a GPU can run
  // asynchronously (to(device, non_blocking)); set by Fabric on CUDA.
  bool pin_memory = false;
  int rank = 0;             // this rank's shard of every epoch
  int world_size = 1;
};

// Index order of one epoch for one rank: a seeded permutation (or identity),
// padded like DistributedSampler to a multiple of world_size, then every
// world_size-th index from rank. Portable across compilers and LibTorch
// versions (own PRNG, not std:: distributions or torch::randperm).
std::vector<int64_t> epoch_indices(int64_t n, bool shuffle, uint64_t seed,
                                   int epoch, int rank, int world_size);

class Loader {
 public:
  Loader(std::shared_ptr<const ExampleSet> set, LoaderOptions opts);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t num_batches() const;  // per epoch, after drop_last and limit
  int64_t num_samples() const;  // samples this rank sees per epoch
  const LoaderOptions& options() const { return opts_; }

  // Starts an epoch (stops any unfinished one). skip_batches: resume an
  // epoch after that many batches (same order, nothing made for the skipped).
  void start_epoch(int epoch, int64_t skip_batches = 0);
  // The next batch of the current epoch, or nullopt at its end.
  std::optional<Batch> next();

 private:
  Batch make_batch(int64_t b) const;
  void stop();

  std::shared_ptr<const ExampleSet> set_;
  LoaderOptions opts_;
  std::vector<int64_t> order_;
  int64_t real_ = 0;  // samples of order_ that are not padding (they come first)
  int64_t next_batch_ = 0;
  int epoch_ = -1;  // -1 until start_epoch; next() then starts epoch 0
  // prefetch state
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  int64_t produced_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace accel::data
