// accel/models/linear_cross_entropy.h: chunked projection and cross-entropy.
#include "accel/models/linear_cross_entropy.h"

#include <ATen/record_function.h>

#include "accel/util/torch_compat.h"

namespace accel::models {
namespace lce_detail {

// The dtype the matmuls run in: autocast's where it is on for the hidden
// states' device, else the hidden states' own.
torch::ScalarType compute_dtype(const torch::Tensor& h) {
  return compat::active_autocast_dtype(h.device().type()).value_or(h.scalar_type());
}

struct Sums {
  torch::Tensor loss;     // float32 scalar: the summed loss over real labels
  torch::Tensor count;    // float32 scalar: the real labels
  torch::Tensor grad_h;   // float32 [N, H]: d(summed loss)/d hidden (undefined unless asked)
  torch::Tensor grad_w;   // float32 [V, H]: d(summed loss)/d weight (undefined unless asked)
};

// h [N, H], w [V, H] in the compute dtype, y [N].
Sums chunked(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& y, int64_t chunk,
             int64_t ignore_index, bool gradients) {
  const int64_t N = h.size(0);
  const auto f32 = h.options().dtype(torch::kFloat);
  const auto valid = y.ne(ignore_index);
  const auto safe = y.masked_fill(valid.logical_not(), 0).unsqueeze(1);  // [N, 1]
  Sums s;
  s.loss = torch::zeros({}, f32);
  s.count = valid.sum().to(torch::kFloat);
  if (gradients) {
    s.grad_h = torch::empty({N, h.size(1)}, f32);
    s.grad_w = torch::zeros({w.size(0), w.size(1)}, f32);
  }
  const int64_t step = chunk > 0 ? chunk : std::max<int64_t>(N, 1);
  for (int64_t i = 0; i < N; i += step) {
    const int64_t c = std::min(step, N - i);
    const auto hi = h.narrow(0, i, c);
    const auto yi = safe.narrow(0, i, c);
    const auto vi = valid.narrow(0, i, c).to(torch::kFloat).unsqueeze(1);  // [c, 1]
    auto logits = torch::mm(hi, w.t()).to(torch::kFloat);                 // [c, V]
    const auto lse = torch::logsumexp(logits, 1, /*keepdim=*/true);        // [c, 1]
    s.loss += ((lse - logits.gather(1, yi)) * vi).sum();
    if (!gradients) continue;
    // d(loss_i)/d(logits_i) = softmax - one-hot, zero where the label is ignored.
    logits.sub_(lse).exp_();
    logits.scatter_add_(1, yi, -vi);
    logits.mul_(vi);
    const auto g = logits.to(h.scalar_type());
    s.grad_h.narrow(0, i, c).copy_(torch::mm(g, w));
    s.grad_w.add_(torch::mm(g.t(), hi));
  }
  return s;
}

struct LinearCrossEntropyFn : torch::autograd::Function<LinearCrossEntropyFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h,
                               const torch::Tensor& w, const torch::Tensor& y, int64_t chunk,
                               int64_t ignore_index) {
    RECORD_FUNCTION("accel::linear_cross_entropy", std::vector<c10::IValue>{h, w});
    const auto dtype = compute_dtype(h);
    auto s = chunked(h.to(dtype), w.to(dtype), y, chunk, ignore_index, /*gradients=*/true);
    ctx->saved_data["h_dtype"] = static_cast<int64_t>(h.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    ctx->save_for_backward({s.grad_h, s.grad_w, s.count});
    return s.loss / s.count;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("accel::linear_cross_entropy_backward", std::vector<c10::IValue>{});
    const auto saved = ctx->get_saved_variables();
    const auto scale = grads[0].to(torch::kFloat) / saved[2];
    const auto h_dtype = static_cast<torch::ScalarType>(ctx->saved_data["h_dtype"].toInt());
    const auto w_dtype = static_cast<torch::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    return {(saved[0] * scale).to(h_dtype), (saved[1] * scale).to(w_dtype), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace lce_detail

torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& labels, int64_t chunk, int64_t ignore_index) {
  const int64_t H = hidden.size(-1);
  if (weight.dim() != 2 || weight.size(1) != H) {
    throw std::invalid_argument("linear_cross_entropy: weight " + std::to_string(weight.dim()) +
                                "-d does not project hidden states of width " + std::to_string(H));
  }
  const auto h = hidden.reshape({-1, H});
  const auto y = labels.reshape({-1});
  if (y.size(0) != h.size(0)) {
    throw std::invalid_argument("linear_cross_entropy: " + std::to_string(y.size(0)) + " labels for " +
                                std::to_string(h.size(0)) + " hidden states");
  }
  if (torch::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad())) {
    return lce_detail::LinearCrossEntropyFn::apply(h, weight, y, chunk, ignore_index);
  }
  RECORD_FUNCTION("accel::linear_cross_entropy", std::vector<c10::IValue>{h, weight});
  const auto dtype = lce_detail::compute_dtype(h);
  const auto s = lce_detail::chunked(h.to(dtype), weight.to(dtype), y, chunk, ignore_index, false);
  return s.loss / s.count;
}

}  // namespace accel::models
