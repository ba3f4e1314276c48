// How one pass over a split divides over ranks and batches, as Loader runs it
// (torch's DistributedSampler with drop_last=False: the rows padded by
// wrapping around to a multiple of the ranks, rank r taking positions r,
// r + W, ...; then batches, the last one short or dropped, and the limit).
// Torch-free, so a sweep can plan a run's work from its config and split
// sizes without loading a model (accel/train/work.h).
#pragma once

#include <algorithm>
#include <cstdint>

namespace accel::data {

struct PassShape {
  int64_t batches = 0;       // per rank (every rank runs as many)
  int64_t real_samples = 0;  // rows that are not padding, all ranks together
};

inline PassShape pass_shape(int64_t rows, int64_t batch_size, bool drop_last, int64_t limit,
                            int world_size) {
  PassShape s;
  if (rows <= 0 || batch_size <= 0 || world_size <= 0) return s;
  const int64_t world = world_size;
  const int64_t per_rank = (rows + world - 1) / world;
  s.batches = drop_last ? per_rank / batch_size : (per_rank + batch_size - 1) / batch_size;
  if (limit > 0) s.batches = std::min(s.batches, limit);
  const int64_t covered = std::min(per_rank, s.batches * batch_size);  // positions per rank
  for (int64_t r = 0; r < world && r < rows; ++r) {
    const int64_t real = (rows - r + world - 1) / world;  // rank r's rows that are not padding
    s.real_samples += std::min(real, covered);
  }
  return s;
}

}  // namespace accel::data
