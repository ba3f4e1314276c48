// What the LibTorch this build links against can do, as C++ constants.
// CMake decides both from the LibTorch itself (cmake/torch_features.cmake)
// and defines ACCEL_WITH_CUDA / ACCEL_WITH_NCCL (0 or 1) on every target
// that links accel. Code that needs a CUDA or NCCL declaration to compile
// guards it with `#if ACCEL_WITH_NCCL`; code that only branches at run time
// uses these constants. Either way, a 1 here means "compiled in", not "a GPU
// is present": ask torch::cuda::is_available() for that.
#pragma once

#if !defined(ACCEL_WITH_CUDA) || !defined(ACCEL_WITH_NCCL)
#error "ACCEL_WITH_CUDA and ACCEL_WITH_NCCL are set by CMakeLists.txt (link target accel)"
#endif

namespace accel::build {

// LibTorch is a CUDA build: CUDA tensors, streams, events, graph capture and
// the caching allocator's statistics exist (whether a GPU is present or not).
constexpr bool kWithCuda = ACCEL_WITH_CUDA != 0;

// LibTorch has c10d's NCCL process group (ProcessGroupNCCL).
constexpr bool kWithNccl = ACCEL_WITH_NCCL != 0;

static_assert(kWithCuda || !kWithNccl, "the NCCL process group needs a CUDA LibTorch");

}  // namespace accel::build
