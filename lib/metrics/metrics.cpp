#include "accel/metrics/metrics.h"

#include "accel/build_info.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <numeric>
#include <sstream>
#include <thread>

#include <torch/torch.h>

#include "accel/metrics/hardware.h"
#include "accel/util/build_features.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

#if ACCEL_WITH_CUDA
#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>
#endif
#if ACCEL_WITH_CUDA
#include <dlfcn.h>
#endif


namespace accel::metrics {

double percentile(std::vector<double> sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q * double(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}

Spread spread(std::vector<double> values) {
  Spread s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = int64_t(values.size());
  s.median = percentile(values, 0.5);
  s.p10 = percentile(values, 0.1);
  s.p90 = percentile(values, 0.9);
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
  return s;
}

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      int64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

int default_threads(int local_ranks) {
  return std::max(1, available_cores() / std::max(1, local_ranks));
}

namespace {

// cpuinfo's "model name", read once with the rest of the CPU's identity.
std::string cpu_model() {
  const auto& name = cpu_identity().model_name;
  return name.empty() ? "unknown" : name;
}

// The first shared object mapped into this process whose path holds one of
// `names` (resolved through links), or "" where none is.
std::string mapped_library(std::initializer_list<const char*> names) {
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    const auto base = path.substr(path.rfind('/') + 1);
    for (const char* n : names) {
      if (base.find(n) != std::string::npos) {
        std::error_code ec;
        auto real = std::filesystem::canonical(path, ec);
        return ec ? path : real.string();
      }
    }
  }
  return "";
}

// The BLAS shared object actually mapped into this process (Debian's
// alternatives decide which one libblas.so.3 is).
std::string blas_in_use() {
  const auto lib = mapped_library({"libblas", "openblas", "libmkl"});
  return lib.empty() ? "none mapped" : lib;
}

#if ACCEL_WITH_CUDA
std::string dotted(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}
#endif

// GPU facts that decide speed and numerics: each device's name, compute
// capability and memory, and the CUDA runtime, driver, cuDNN and NCCL versions.
void add_gpu_facts(nlohmann::json& env) {
#if ACCEL_WITH_CUDA
  nlohmann::json gpus = nlohmann::json::array();
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    gpus.push_back({{"name", p.name},
                    {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
                    {"memory_bytes", int64_t(p.totalGlobalMem)},
                    {"multiprocessors", p.multiProcessorCount}});
  }
  env["gpus"] = gpus;
  if (!gpus.empty()) {
    env["gpu_name"] = gpus[0]["name"];
    env["gpu_compute_capability"] = gpus[0]["compute_capability"];
  }
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) env["cuda_version"] = dotted(v, 1000, 10);
  if (cudaDriverGetVersion(&v) == cudaSuccess) env["cuda_driver_version"] = dotted(v, 1000, 10);
  try {
    const auto& hooks = at::detail::getCUDAHooks();
    env["cudnn_version"] = std::to_string(hooks.versionCuDNN());  // compiled against
    if (const long loaded = compat::cudnn_runtime_version(hooks); loaded > 0) {
      env["cudnn_runtime_version"] = std::to_string(loaded);
    }
  } catch (const std::exception&) {
  }
  // The CUDA libraries this process actually mapped: a toolkit's lib64 ahead
  // of torch's own nvidia-* wheels on the loader's path makes them differ
  // from what the same torch loads in Python.
  nlohmann::json libs = nlohmann::json::object();
  for (const char* name : {"libcudart.so", "libcublas.so", "libcublasLt.so", "libcudnn.so",
                           "libnccl.so", "libtorch_cuda.so"}) {
    if (auto path = mapped_library({name}); !path.empty()) libs[name] = path;
  }
  env["cuda_libraries"] = libs;
  // NCCL is LibTorch's private dependency (not on our link line): ask the
  // loaded library, if any. ncclGetVersion: major*10000 + minor*100 + patch.
  using NcclGetVersion = int (*)(int*);
  if (auto* fn = reinterpret_cast<NcclGetVersion>(::dlsym(RTLD_DEFAULT, "ncclGetVersion"))) {
    int nccl = 0;
    if (fn(&nccl) == 0 && nccl > 0) {
      env["nccl_version"] = std::to_string(nccl / 10000) + "." +
                            std::to_string(nccl / 100 % 100) + "." + std::to_string(nccl % 100);
    }
  }
#else
  (void)env;
#endif
}

}  // namespace

void apply_library_switches() {
  if (const char* v = std::getenv("ACCEL_ONEDNN"); v != nullptr && std::string(v) == "0") {
    at::globalContext().setUserEnabledMkldnn(false);
  }
}

nlohmann::json environment(int threads) {
  nlohmann::json env;
  env["accel_bench_version"] = ACCEL_VERSION;
  env["git_sha"] = ACCEL_GIT_SHA;
  env["libtorch_version"] = compat::torch_version();
  env["compiler"] = ACCEL_CXX_COMPILER;
  env["cpu_model"] = cpu_model();
  // Which CPU class, where cpuinfo says (the machine id names it).
  if (const auto cpu = cpu_identity(); cpu.family >= 0) {
    env["cpu_vendor"] = cpu.vendor;
    env["cpu_family"] = cpu.family;
    env["cpu_model_number"] = cpu.model;
    env["cpu_class"] = cpu_class(cpu);
  }
  env["cpu_features"] = cpu_features().names();
  if (cpu_flags_overridden()) env["cpu_flags_overridden"] = true;
  env["cores"] = available_cores();
  env["threads"] = threads;
  env["blas"] = blas_in_use();
  if (const auto core = openblas_core(); !core.empty()) {
    env["openblas_core"] = core;
    const char* set = std::getenv("OPENBLAS_CORETYPE");
    env["openblas_coretype"] = set ? set : "";
    // Set by the CLI because OpenBLAS fell back to generic kernels (see hardware.h).
    if (std::getenv("ACCEL_OPENBLAS_CORETYPE_AUTO") != nullptr) env["openblas_coretype_auto"] = true;
  }
  if (!at::globalContext().userEnabledMkldnn()) env["onednn"] = "off (ACCEL_ONEDNN=0)";
  if (const char* isa = std::getenv("ACCEL_KERNEL_ISA")) env["kernel_isa"] = isa;
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  env["omp_wait_policy"] = wait ? wait : "default";
  // The CLI's glibc malloc settings (apps/accel-bench: large blocks kept in the heap).
  const char* keep = std::getenv("ACCEL_MALLOC_KEEP");
  env["malloc"] = keep ? keep : "glibc defaults";
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) env["hostname"] = host;
  const bool cuda = torch::cuda::is_available();
  env["cuda_available"] = cuda;
  env["gpu_count"] = cuda ? int(torch::cuda::device_count()) : 0;
  if (cuda) add_gpu_facts(env);
  return env;
}

}  // namespace accel::metrics
