// Every difference between the LibTorch versions accel-bench supports lives
// here (Debian 12's 1.13, Debian 13's 2.6, pip/zip LibTorch 2.x with CUDA),
// guarded by TORCH_VERSION_MAJOR/MINOR. Nothing else checks versions.
#pragma once

#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>
#include <stdexcept>
#include <string>

#include <ATen/autocast_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adam.h>
#include <torch/torch.h>
#include <torch/version.h>

#define ACCEL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if ACCEL_TORCH_AT_LEAST(2, 1)
#include <ATen/ops/_fused_adamw.h>
#endif

namespace accel::compat {

inline std::string torch_version() { return TORCH_VERSION; }

// True where at::scaled_dot_product_attention exists (2.0+): flash and
// memory-efficient kernels on GPU, a fused kernel on CPU.
constexpr bool kHasSdpa = ACCEL_TORCH_AT_LEAST(2, 0);

// Softmax attention over [B, H, S, Dh] contiguous q, k, v; `mask` (optional)
// is bool [B, 1, 1, S] or [B, H, S, S], true where a query attends to a key
// (text: key padding). 2.x: at::scaled_dot_product_attention. 1.13: the
// explicit form, written with contiguous matmul operands (1.13's CPU bmm
// loops per batch on a transposed operand, ~10x slower), masked keys filled
// with -inf before the softmax.
// (On a CPU in float32 or bf16, 1.13 models take accel-bench's fused kernel
// before this: accel/models/attention.h.)
// `drop` (optional) replaces torch::dropout on the attention weights.
// `causal`: query i attends to keys 0..i only (decoders), with `mask` too.
using DropoutOp = torch::Tensor (*)(const torch::Tensor&, double, bool);
inline torch::Tensor attention_explicit(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, double dropout_p,
                                        bool training, const torch::Tensor& mask = {},
                                        DropoutOp drop = nullptr, bool causal = false) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1).contiguous());
  auto attend = mask;
  if (causal) {
    const auto lower = torch::ones({q.size(-2), k.size(-2)}, q.options().dtype(torch::kBool)).tril();
    attend = attend.defined() ? attend.logical_and(lower) : lower;
  }
  if (attend.defined()) {
    scores = scores.masked_fill(attend.logical_not(), -std::numeric_limits<double>::infinity());
  }
  auto weights = torch::softmax(scores, -1);
  if (training && dropout_p > 0.0) {
    weights = drop != nullptr ? drop(weights, dropout_p, true)
                              : torch::dropout(weights, dropout_p, /*train=*/true);
  }
  return torch::matmul(weights, v);
}

// 2.x with attention dropout in training and a `drop` op given: the explicit
// form with it (on a CPU, SDPA with dropout takes its math path, the same
// matmul-softmax-dropout-matmul with torch's dropout).
inline torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double dropout_p,
                               bool training, const torch::Tensor& mask = {},
                               DropoutOp drop = nullptr, bool causal = false) {
#if ACCEL_TORCH_AT_LEAST(2, 0)
  if (drop != nullptr && training && dropout_p > 0.0 && q.device().is_cpu()) {
    return attention_explicit(q, k, v, dropout_p, training, mask, drop, causal);
  }
  // SDPA takes is_causal or a mask, not both: with key padding, one mask.
  auto attend = mask;
  if (causal && mask.defined()) {
    attend = mask.logical_and(
        torch::ones({q.size(-2), k.size(-2)}, mask.options().dtype(torch::kBool)).tril());
  }
  return at::scaled_dot_product_attention(
      q, k, v, attend.defined() ? c10::optional<at::Tensor>(attend) : c10::optional<at::Tensor>(),
      training ? dropout_p : 0.0, /*is_causal=*/causal && !mask.defined());
#else
  return attention_explicit(q, k, v, dropout_p, training, mask, drop, causal);
#endif
}

// The explicit attention on every version: the reference SDPA is checked
// against in tests.
inline torch::Tensor attention_reference(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1).contiguous());
  return torch::matmul(torch::softmax(scores, -1), v);
}

// ---- autocast and reduced-precision support ----------------------------------
// Autocast state is per thread (TLS) in every version. 1.13-2.3 name the
// calls per device (set_cpu_enabled, set_enabled for CUDA,
// set_autocast_cpu_dtype, set_autocast_gpu_dtype, ...); 2.4 made them
// device-generic (set_autocast_enabled(device, on), set_autocast_dtype(device,
// dtype); pytorch/pytorch#124359) and deprecated the old ones with warnings,
// so each version must call its own. Only CPU and CUDA are handled.

namespace detail {
inline void autocast_check_device(c10::DeviceType device) {
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA) {
    throw std::invalid_argument("autocast: device type " + c10::DeviceTypeName(device) +
                                " is not supported (cpu and cuda only)");
  }
}
}  // namespace detail

inline bool autocast_enabled(c10::DeviceType device) {
  detail::autocast_check_device(device);
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
  detail::autocast_check_device(device);
#if ACCEL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

// The autocast ("lower precision") dtype of DEVICE: bf16 on CPU, fp16 on
// CUDA unless set.
inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
  detail::autocast_check_device(device);
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

// The dtype autocast computes DEVICE's ops in right now, or nothing where it
// is off or the device has no autocast (any device: kernels that pick their
// own compute dtype ask this, as autocast's ops would decide).
inline std::optional<c10::ScalarType> active_autocast_dtype(c10::DeviceType device) {
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA) return std::nullopt;
  if (!autocast_enabled(device)) return std::nullopt;
  return autocast_dtype(device);
}

// 1.13's set_autocast_cpu_dtype throws c10::Error for anything but bf16
// ("Currently, AutocastCPU only support Bfloat16 as the autocast_cpu_dtype");
// 2.6 takes fp16 on CPU too.
inline void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
  detail::autocast_check_device(device);
#if ACCEL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

// The same in every version; wrapped so callers use only this header.
inline int autocast_increment_nesting() { return at::autocast::increment_nesting(); }
inline int autocast_decrement_nesting() { return at::autocast::decrement_nesting(); }
inline void autocast_clear_cache() { at::autocast::clear_cache(); }

// aten::_amp_foreach_non_finite_check_and_unscale_ (and _amp_update_scale_)
// have CUDA kernels in every version, CPU kernels from 2.3
// (pytorch/pytorch#109281); 1.13 on CPU: "Could not run ... from the 'CPU'
// backend".
inline bool has_amp_unscale_kernel(c10::DeviceType device) {
  if (device == c10::DeviceType::CUDA) return true;
  return device == c10::DeviceType::CPU && ACCEL_TORCH_AT_LEAST(2, 3);
}

// Runs a small ViT-like forward and backward in fp16 on CPU (conv2d, linear,
// layer_norm, attention, gelu, cross_entropy); false if any kernel is missing.
inline bool probe_cpu_half_kernels() {
  try {
    torch::AutoGradMode grad(true);
    auto img = torch::randn({2, 1, 4, 4}).to(torch::kHalf);
    auto conv_w = torch::randn({8, 1, 2, 2}).to(torch::kHalf).requires_grad_();
    auto lin_w = torch::randn({24, 8}).to(torch::kHalf).requires_grad_();
    auto x = torch::conv2d(img, conv_w, {}, 2).flatten(2).transpose(1, 2);  // [2,4,8]
    x = torch::layer_norm(x, {8});
    auto qkv = torch::linear(x, lin_w).view({2, 4, 3, 2, 4}).permute({2, 0, 3, 1, 4});
    auto parts = qkv.contiguous().unbind(0);
    auto a = attention(parts[0], parts[1], parts[2], 0.0, false);
    auto logits = torch::gelu(a.transpose(1, 2).reshape({2, 4, 8})).select(1, 0);
    auto loss = torch::cross_entropy_loss(logits, torch::zeros({2}, torch::kLong));
    loss.backward();
    return conv_w.grad().defined() && conv_w.grad().scalar_type() == torch::kHalf;
  } catch (const c10::Error&) {
    return false;
  }
}

// Whether fp16 weights and compute (16-true) work on CPU. 1.13: no
// ("addmm_impl_cpu_" / "LayerNormKernelImpl" / "slow_conv2d_cpu" ... "not
// implemented for 'Half'"); 2.6: yes. Versions in between are probed once.
inline bool cpu_half_kernels() {
#if !ACCEL_TORCH_AT_LEAST(2, 0)
  return false;
#elif ACCEL_TORCH_AT_LEAST(2, 6)
  return true;
#else
  static const bool ok = probe_cpu_half_kernels();
  return ok;
#endif
}

// ---- allocators ------------------------------------------------------------------
// c10::Allocator: allocate() is const before 2.3 and not from 2.3 on, when
// copy_data() (for Allocator::clone) also became an override every
// allocator must give. A wrapping allocator declares allocate() with
// ACCEL_ALLOCATE_CONST and puts ACCEL_ALLOCATOR_COPY_DATA in its body.
#if ACCEL_TORCH_AT_LEAST(2, 3)
#define ACCEL_ALLOCATE_CONST
#define ACCEL_ALLOCATOR_COPY_DATA                                                   \
  void copy_data(void* dest, const void* src, std::size_t count) const override { \
    default_copy_data(dest, src, count);                                          \
  }
#else
#define ACCEL_ALLOCATE_CONST const
#define ACCEL_ALLOCATOR_COPY_DATA
#endif

// ---- c10d (process groups) -----------------------------------------------------
// torch::optim::Optimizer::state() is keyed by the parameter's TensorImpl:
// 1.x as its address printed ("0x...", as c10::guts::to_string), 2.x as the
// pointer. Decided by the map's key type.
// Optimizer::zero_grad as 2.x does it by default: gradients set to none
// (undefined), so the next backward pass assigns its gradient instead of
// adding it to a zeroed one (no fill, no add: ~40 ms of the text step on
// 1.13, whose C++ zero_grad() zeros in place and has no set_to_none).
inline void zero_grad_to_none(torch::optim::Optimizer& opt) {
#if ACCEL_TORCH_AT_LEAST(2, 0)
  opt.zero_grad(/*set_to_none=*/true);
#else
  for (auto& group : opt.param_groups()) {
    for (auto& p : group.params()) {
      if (p.mutable_grad().defined()) p.mutable_grad().reset();
    }
  }
#endif
}

using OptimizerStateMap =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
template <typename Key = OptimizerStateMap::key_type>
Key optimizer_state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// ---- fused Adam ------------------------------------------------------------------
// ATen's multi-tensor Adam and AdamW (one launch updates a list of tensors;
// what torch.optim.Adam(fused=True) calls). In every version here
//   at::_fused_adam_(TensorList self, TensorList grads, TensorList exp_avgs,
//                    TensorList exp_avg_sqs, TensorList max_exp_avg_sqs,
//                    TensorList state_steps, double lr, double beta1, double beta2,
//                    double weight_decay, double eps, bool amsgrad, bool maximize,
//                    optional<Tensor> grad_scale = {}, optional<Tensor> found_inf = {})
// with Adam's L2 weight decay (grad + wd * p); at::_fused_adamw_, the same
// arguments with decoupled decay (p * (1 - lr * wd)), is absent from 1.13 (it
// came with 2.x; used here from 2.1). 2.x add overloads taking lr as a
// Tensor. Kernels: CUDA in every version (a CUDA LibTorch), CPU from 2.4
// (1.13 registers none for the CPU: its ATen/ops has no
// _fused_adam_cpu_dispatch.h). state_steps are float32 scalars on the tensors' device, one per
// tensor, which the kernel reads as the step being taken (bias corrections)
// and does not advance.
constexpr bool kHasFusedAdamW = ACCEL_TORCH_AT_LEAST(2, 1);
constexpr bool kHasFusedAdamCpuKernel = ACCEL_TORCH_AT_LEAST(2, 4);

// Whether fused_adam_step runs for tensors on DEVICE (Adam, or AdamW when
// `decoupled`).
inline bool has_fused_adam(c10::DeviceType device, bool decoupled) {
  if (decoupled && !kHasFusedAdamW) return false;
  if (device == c10::DeviceType::CUDA) return true;
  return device == c10::DeviceType::CPU && kHasFusedAdamCpuKernel;
}

// One Adam (AdamW when `decoupled`) step over equally long lists of float
// tensors on one device: each state step is advanced by one (as torch.optim's
// fused path does before its kernel), then the kernel updates params,
// exp_avgs and exp_avg_sqs in place (amsgrad and maximize off, no grad
// scale). Throws std::runtime_error where this version has no such kernel
// (has_fused_adam), std::invalid_argument for lists that do not match.
inline void fused_adam_step(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                            at::TensorList exp_avg_sqs, at::TensorList state_steps, double lr,
                            double beta1, double beta2, double weight_decay, double eps,
                            bool decoupled) {
  const size_t n = params.size();
  if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n ||
      state_steps.size() != n) {
    std::ostringstream m;
    m << "fused_adam_step: lists of " << n << " params, " << grads.size() << " grads, "
      << exp_avgs.size() << " exp_avgs, " << exp_avg_sqs.size() << " exp_avg_sqs and "
      << state_steps.size() << " state_steps";
    throw std::invalid_argument(m.str());
  }
  if (n == 0) return;
  const auto device = params.front().device();
  if (!has_fused_adam(device.type(), decoupled)) {
    throw std::runtime_error(std::string("fused_adam_step: LibTorch ") + TORCH_VERSION +
                             " has no fused " + (decoupled ? "AdamW" : "Adam") + " kernel for " +
                             device.str() + " tensors");
  }
  at::_foreach_add_(state_steps, at::Scalar(1.0));
#if ACCEL_TORCH_AT_LEAST(2, 1)
  if (decoupled) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps,
                      lr, beta1, beta2, weight_decay, eps, /*amsgrad=*/false,
                      /*maximize=*/false);
    return;
  }
#endif
  at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps, lr,
                   beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
}

// CUDAGraph::capture_begin takes a capture mode from 2.0 on; thread-local
// capture lets other threads (the loader pinning host memory) call the CUDA
// runtime while this one captures. Earlier versions capture in global mode.
// A template so this header needs no CUDA declarations (mode is
// cudaStreamCaptureModeThreadLocal, passed by the CUDA-only caller).
template <typename Graph, typename Mode>
void cuda_graph_capture_begin(Graph& graph, Mode thread_local_mode) {
#if ACCEL_TORCH_AT_LEAST(2, 0)
  graph.capture_begin({0, 0}, thread_local_mode);
#else
  (void)thread_local_mode;
  graph.capture_begin();
#endif
}

// The cuDNN version the process loaded: CUDAHooksInterface::versionRuntimeCuDNN
// where the hooks have it (2.x), else -1 (the caller then has only the version
// compiled against, versionCuDNN). Detected by the member, not the version.
template <typename H, typename = void>
struct HasRuntimeCudnn : std::false_type {};
template <typename H>
struct HasRuntimeCudnn<H, std::void_t<decltype(std::declval<const H&>().versionRuntimeCuDNN())>>
    : std::true_type {};
template <typename Hooks>
long cudnn_runtime_version(const Hooks& hooks) {
  if constexpr (HasRuntimeCudnn<Hooks>::value) {
    return hooks.versionRuntimeCuDNN();
  } else {
    (void)hooks;
    return -1;
  }
}

// CUDA's lazy initialization (what the first CUDA tensor triggers): the
// caching allocator knows its devices only after it, and answers
// resetPeakStats/getDeviceStats before it with "Invalid device argument".
// at::Context::lazyInitDevice(kCUDA) where the version has it (2.x; its
// lazyInitCUDA warns as deprecated there), lazyInitCUDA before (1.13).
// Detected by the member, not the version.
template <typename C, typename = void>
struct HasLazyInitDevice : std::false_type {};
template <typename C>
struct HasLazyInitDevice<C, std::void_t<decltype(std::declval<C&>().lazyInitDevice(c10::DeviceType::CUDA))>>
    : std::true_type {};
template <typename Context>
void lazy_init_cuda(Context& ctx) {
  if constexpr (HasLazyInitDevice<Context>::value) {
    ctx.lazyInitDevice(c10::DeviceType::CUDA);
  } else {
    ctx.lazyInitCUDA();
  }
}

// Only translation units that define ACCEL_COMPAT_C10D before including this
// header get these (c10d's headers are heavy; lib/dist/comm.cpp is the user).
// 1.13: ProcessGroupGloo/NCCL derive from c10d::ProcessGroup. 2.0+: they derive
// from c10d::Backend, and c10d::ProcessGroup became a dispatching wrapper; the
// collectives used here (allreduce, broadcast, allgather, _allgather_base,
// _reduce_scatter_base, barrier) have the same signatures on both.
// Gloo has no reduce-scatter in 1.13 (ProcessGroupGloo::reduce_scatter throws
// "ProcessGroupGloo does not support reduce_scatter"); Comm emulates it there
// with an all-reduce and a slice, and uses NCCL's own where it runs.
#if defined(ACCEL_COMPAT_C10D) && !defined(ACCEL_COMPAT_C10D_DONE)
#define ACCEL_COMPAT_C10D_DONE 1
}  // namespace accel::compat

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(ACCEL_WITH_NCCL) && ACCEL_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace accel::compat {

// TCPStore: 2.4+ default to the libuv server (TCPStoreOptions::useLibUV = true), but a
// LibTorch built without libuv (Debian 13's 2.6) then refuses to start the store with
// "use_libuv was requested but PyTorch was build without libuv support". Such builds get
// the classic backend; builds with libuv keep PyTorch's default. 1.13 has no field.
template <typename O, typename = void>
struct HasUseLibUV : std::false_type {};
template <typename O>
struct HasUseLibUV<O, std::void_t<decltype(std::declval<O&>().useLibUV)>> : std::true_type {};

// Turns libuv off when the options have the field and it is on; false otherwise.
template <typename O>
bool drop_libuv(O& opts) {
  if constexpr (HasUseLibUV<O>::value) {
    if (opts.useLibUV) {
      opts.useLibUV = false;
      return true;
    }
  }
  return false;
}

inline c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host,
                                                          c10d::TCPStoreOptions opts) {
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, opts);
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("libuv") != std::string::npos && drop_libuv(opts)) {
      return c10::make_intrusive<c10d::TCPStore>(host, opts);
    }
    throw;
  }
}

#if ACCEL_TORCH_AT_LEAST(2, 0)
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

inline c10::intrusive_ptr<CommBackend> make_gloo_backend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& listen_addr) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(listen_addr));
  opts->threads = 2;  // as torch.distributed's default: async work overlaps
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

// A backend told its device (torch.distributed's init_process_group(device_id=)):
// c10d::Backend::setBoundDeviceId, where the version has it (2.x from about
// 2.3; not 1.13), found by the member itself.
template <typename B, typename = void>
struct HasBoundDeviceId : std::false_type {};
template <typename B>
struct HasBoundDeviceId<B, std::void_t<decltype(std::declval<B&>().setBoundDeviceId(
                               std::declval<c10::optional<at::Device>>()))>> : std::true_type {};

// Binds `device` to the backend where the version can; false where it cannot.
template <typename B>
bool bind_backend_device(B& backend, const at::Device& device) {
  if constexpr (HasBoundDeviceId<B>::value) {
    backend.setBoundDeviceId(device);
    return true;
  } else {
    (void)backend;
    (void)device;
    return false;
  }
}

#if defined(ACCEL_WITH_NCCL) && ACCEL_WITH_NCCL
constexpr bool kHasNcclProcessGroup = true;
// `device`: this rank's CUDA device. It becomes the current device before the
// process group exists (NCCL's communicators and streams are made on the
// current device) and, where the version can, the group's bound device, so
// NCCL does not guess the device from the rank.
inline c10::intrusive_ptr<CommBackend> make_nccl_backend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const at::Device& device) {
  if (!device.is_cuda() || !device.has_index()) {
    throw std::invalid_argument("make_nccl_backend: needs a CUDA device with an index, got " +
                                device.str());
  }
  c10::cuda::set_device(device.index());
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  bind_backend_device(*pg, device);
  return pg;
}
#else
constexpr bool kHasNcclProcessGroup = false;
inline c10::intrusive_ptr<CommBackend> make_nccl_backend(
    const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds, const at::Device&) {
  throw std::runtime_error("this LibTorch has no NCCL process group");
}
#endif
#endif  // ACCEL_COMPAT_C10D

}  // namespace accel::compat
