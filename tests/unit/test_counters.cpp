// The step counter (accel/metrics/profiler.h) against each model family's
// analytic FLOPs: one training step (forward, loss, backward) of every family
// counts 3x its forward FLOPs, in 32-true and under bf16-mixed autocast, and
// autocast's re-dispatch of an op on its cast list is one call, not two. On
// a machine with a GPU the same cases run on CUDA too.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "accel/data/batch.h"
#include "accel/metrics/profiler.h"
#include "accel/models/bert.h"
#include "accel/models/gpt.h"
#include "accel/models/vit.h"
#include "accel/precision/precision.h"
#include "support/skip.h"

namespace ap = accel::precision;
namespace am = accel::models;
using accel::data::Inputs;

namespace {

struct Case {
  std::string family;
  std::shared_ptr<am::Model> model;
  Inputs inputs;
  torch::Tensor labels;
};

// A small model of each family, seeded, in training mode, with a batch of
// its inputs (text rows without padding: padded tokens are computed too, and
// the analytic count is of the batch's shape).
std::vector<Case> cases(const torch::Device& device) {
  std::vector<Case> out;
  torch::manual_seed(7);
  {
    am::VisionTransformer vit(am::vit_preset("vit_tiny_fmnist"));
    vit->to(device);
    out.push_back({"vit", vit.ptr(), {{"pixels", torch::randn({4, 1, 56, 56}).to(device)}},
                   torch::randint(0, 10, {4}, torch::kLong).to(device)});
  }
  for (const char* arch : {"bert", "distilbert"}) {
    auto spec = am::text_preset(arch, std::string(arch) == "bert" ? "bert_tiny" : "distilbert_tiny");
    spec.dropout = spec.attention_dropout = spec.classifier_dropout = 0.0;
    am::TextClassifier text(spec);
    text->to(device);
    auto ids = torch::randint(1000, 5000, {4, 16}, torch::kLong);
    out.push_back({arch, text.ptr(),
                   {{"input_ids", ids.to(device)}, {"attention_mask", torch::ones({4, 16}, torch::kLong).to(device)}},
                   torch::randint(0, 2, {4}, torch::kLong).to(device)});
  }
  // Decoders (next-token logits [B, S, vocab], a label per token), both
  // styles: learned positions and GELU; rotary, grouped key-value heads, SwiGLU.
  for (const std::string preset : {"gpt_tiny", "llama_tiny"}) {
    auto spec = am::decoder_preset(preset);
    spec.vocab_size = 512;
    am::DecoderLM lm(spec);
    lm->to(device);
    out.push_back({preset, lm.ptr(), {{"input_ids", torch::randint(0, 512, {4, 24}, torch::kLong).to(device)}},
                   torch::randint(0, 512, {4, 24}, torch::kLong).to(device)});
  }
  for (auto& c : out) c.model->train();
  return out;
}

// One counted training step of `c` under `precision`.
accel::metrics::StepCounts counted_step(Case& c, const std::string& precision, c10::DeviceType device) {
  const auto policy = ap::make_policy(precision);
  c.model->zero_grad();
  accel::metrics::StepCounter counter;
  counter.start();
  torch::Tensor loss;
  {
    ap::AutocastGuard guard(policy, device);
    Inputs cast;
    for (const auto& [name, t] : c.inputs) cast.emplace(name, ap::cast_input(policy, t));
    auto logits = ap::cast_output(policy, c.model->forward(cast));
    if (logits.dim() == 3) logits = logits.flatten(0, 1);  // a decoder's: one label per token
    loss = torch::cross_entropy_loss(logits, c.labels.flatten());
  }
  loss.backward();
  return counter.stop();
}

void check_counts_agree(const torch::Device& device) {
  for (auto& c : cases(device)) {
    const double analytic = 3.0 * c.model->forward_flops(c.inputs);
    REQUIRE(analytic > 0);
    std::map<std::string, int64_t> calls_fp32;
    for (const std::string precision : {"32-true", "bf16-mixed"}) {
      CAPTURE(c.family);
      CAPTURE(precision);
      const auto counts = counted_step(c, precision, device.type());
      const double ratio = counts.matmul_flops() / analytic;
      CAPTURE(ratio);
      CHECK(std::fabs(ratio - 1.0) <= 0.01);
      // Autocast casts and calls an op again below its key: still one call of
      // each matmul-class op that float32 runs too. (A precision may take
      // another attention path: on LibTorch 2.x a CPU runs bf16 attention as
      // explicit bmm and float32 through SDPA's fused kernel.)
      if (precision == "32-true") {
        calls_fp32 = counts.calls;
      } else {
        int shared = 0;
        for (const auto& [name, f] : counts.flops) {
          if (calls_fp32.count(name) == 0) continue;
          ++shared;
          CAPTURE(name);
          CHECK(counts.calls.at(name) == calls_fp32[name]);
        }
        CHECK(shared > 0);  // the projections (addmm) at least
      }
    }
  }
}

}  // namespace

TEST_CASE("counters: a training step of every family counts its analytic FLOPs within 1% in 32-true and bf16-mixed") {
  check_counts_agree(torch::Device(torch::kCPU));
}

TEST_CASE("gpu counters: a training step of every family counts its analytic FLOPs within 1% on CUDA") {
  if (!torch::cuda::is_available()) {
    accel_test::skip("no GPU");
    return;
  }
  check_counts_agree(torch::Device(torch::kCUDA, 0));
}

TEST_CASE("counters: an op autocast dispatches again inside itself is one call with one count of FLOPs") {
  const auto policy = ap::make_policy("bf16-mixed");
  auto bias = torch::randn({8});
  auto a = torch::randn({6, 5});
  auto b = torch::randn({5, 8});
  accel::metrics::StepCounter counter;
  counter.start();
  {
    ap::AutocastGuard guard(policy, c10::DeviceType::CPU);
    auto y = torch::addmm(bias, a, b);
    CHECK((y.scalar_type() == torch::kBFloat16));  // it did run under autocast
  }
  const auto counts = counter.stop();
  CHECK(counts.calls.at("aten::addmm") == 1);
  CHECK(counts.flops.at("aten::addmm") == doctest::Approx(2.0 * 6 * 5 * 8));
}
