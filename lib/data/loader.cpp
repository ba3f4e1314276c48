// Epoch index orders, per-batch transforms and the (optionally prefetching)
// batch loader.
#include <algorithm>
#include <exception>
#include <stdexcept>

#include "accel/data/loader.h"

namespace accel::data {

namespace {

// splitmix64 written out (not std::mt19937 + std::uniform_int_distribution,
// whose output differs between standard libraries, nor torch::randperm,
// which changed across LibTorch versions): the shuffled order of a seed must
// be the same everywhere so runs are comparable across toolchains.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias: draws below 2^64 mod bound
  // would make the low residues more likely, so they are rejected (at most
  // half of all draws, far fewer for the bounds used here).
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (uint64_t{0} - bound) % bound;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }
};

}  // namespace

std::vector<int64_t> epoch_indices(int64_t n, bool shuffle, uint64_t seed, int epoch, int rank,
                                   int world_size) {
  if (n < 0) throw std::invalid_argument("epoch_indices: n must be >= 0");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("epoch_indices: need 0 <= rank < world_size, got rank " +
                                std::to_string(rank) + " of " + std::to_string(world_size));
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  if (shuffle && n > 1) {
    // Seed and epoch pass through full avalanche rounds, so neighbouring
    // seeds or epochs give unrelated orders.
    SplitMix64 mix{seed};
    SplitMix64 rng{mix.next() ^ (static_cast<uint64_t>(static_cast<int64_t>(epoch)) *
                                 0xD1B54A32D192ED03ULL)};
    rng.next();
    for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
      const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
    }
  }
  if (n == 0) return perm;
  // As DistributedSampler(drop_last=False): pad by wrapping around to a
  // multiple of world_size so every rank runs the same number of steps, then
  // rank r takes positions r, r + world, ...
  const int64_t per_rank = (n + world_size - 1) / world_size;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank));
  for (int64_t p = rank; p < per_rank * world_size; p += world_size)
    mine.push_back(perm[static_cast<size_t>(p % n)]);
  return mine;
}

Loader::Loader(std::shared_ptr<const ExampleSet> set, LoaderOptions opts)
    : set_(std::move(set)), opts_(opts) {
  if (!set_) throw std::invalid_argument("Loader: no dataset");
  if (!set_->collator) throw std::invalid_argument("Loader: the dataset has no collator");
  if (opts_.batch_size <= 0) throw std::invalid_argument("Loader: batch_size must be > 0");
  if (opts_.prefetch < 0) throw std::invalid_argument("Loader: prefetch must be >= 0");
  if (opts_.world_size < 1 || opts_.rank < 0 || opts_.rank >= opts_.world_size)
    throw std::invalid_argument("Loader: need 0 <= rank < world_size");
}

Loader::~Loader() { stop(); }

int64_t Loader::num_batches() const {
  return pass_shape(set_->size(), opts_.batch_size, opts_.drop_last, opts_.limit_batches,
                    opts_.world_size)
      .batches;
}

int64_t Loader::num_samples() const {
  const int64_t per_rank = set_->size() == 0 ? 0 : (set_->size() + opts_.world_size - 1) / opts_.world_size;
  return std::min(per_rank, num_batches() * opts_.batch_size);
}

Batch Loader::make_batch(int64_t b) const {
  const int64_t begin = b * opts_.batch_size;
  const int64_t end = std::min<int64_t>(begin + opts_.batch_size, static_cast<int64_t>(order_.size()));
  const auto idx = torch::from_blob(const_cast<int64_t*>(order_.data()) + begin, {end - begin},
                                    torch::kLong).clone();
  Batch batch = set_->collator->collate(*set_, idx, opts_.collate);
  if (!batch.y.defined()) batch.y = set_->labels.index_select(0, idx);  // else the collator's (next tokens)
  batch.valid = std::clamp<int64_t>(real_ - begin, 0, end - begin);
  if (opts_.pin_memory) {
    for (auto& kv : batch.inputs) kv.second = kv.second.pin_memory();
    batch.y = batch.y.pin_memory();
  }
  return batch;
}

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lk(mu_);
  stopping_ = false;
  ready_.clear();
}

void Loader::start_epoch(int epoch, int64_t skip_batches) {
  stop();
  order_ = epoch_indices(set_->size(), opts_.shuffle, opts_.seed, epoch, opts_.rank,
                         opts_.world_size);
  // Rank r holds global positions r, r + W, ...; those at or past n wrap
  // around (padding), and they come last in the rank's order.
  const int64_t n = set_->size();
  real_ = n > opts_.rank ? (n - opts_.rank + opts_.world_size - 1) / opts_.world_size : 0;
  epoch_ = epoch;
  next_batch_ = std::clamp<int64_t>(skip_batches, 0, num_batches());
  produced_ = 0;
  error_ = nullptr;
  const int64_t nb = num_batches();
  const int64_t first = next_batch_;
  if (opts_.prefetch == 0 || first >= nb) return;
  // The producer only reads set_, opts_ and order_, which stay fixed until
  // the next stop(); the queue and flags are guarded by mu_. It leaves the
  // global intra-op thread settings alone (they belong to the runtime).
  worker_ = std::thread([this, nb, first] {
    torch::NoGradGuard no_grad;  // grad mode is thread-local: set it here too
    for (int64_t b = first; b < nb; ++b) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || static_cast<int64_t>(ready_.size()) < opts_.prefetch; });
        if (stopping_) return;
      }
      Batch batch;
      try {
        batch = make_batch(b);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) return;
        ready_.push_back(std::move(batch));
        ++produced_;
      }
      cv_.notify_all();
    }
  });
}

std::optional<Batch> Loader::next() {
  if (epoch_ < 0) start_epoch(0);
  if (next_batch_ >= num_batches()) return std::nullopt;
  if (opts_.prefetch == 0) {
    torch::NoGradGuard no_grad;
    Batch batch = make_batch(next_batch_);
    ++next_batch_;
    return batch;
  }
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !ready_.empty() || error_ != nullptr; });
  // Batches made before a failure are still delivered in order; the error
  // surfaces at the batch that failed, and again on later calls until the
  // next start_epoch.
  if (ready_.empty()) std::rethrow_exception(error_);
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  ++next_batch_;
  lk.unlock();
  cv_.notify_all();
  return batch;
}

}  // namespace accel::data
