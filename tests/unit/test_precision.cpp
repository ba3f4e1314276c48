// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>


#include "accel/models/vit.h"
#include "accel/machine/peaks.h"
#include "accel/metrics/hardware.h"
#include "accel/precision/catalog.h"
#include "accel/precision/grad_scaler.h"
#include "accel/precision/precision.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

namespace ap = accel::precision;
namespace compat = accel::compat;
using accel::ConfigError;
using accel::RunError;
using c10::DeviceType;

namespace {

torch::nn::Sequential mlp(uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(),
                               torch::nn::Linear(8, 3));
}

torch::Tensor loss_of(torch::nn::Sequential& m, const torch::Tensor& x, const torch::Tensor& y) {
  return torch::cross_entropy_loss(m->forward(x), y);
}

// Puts a fresh gradient on the model: backward of scaler.scale(loss).
void backward(ap::GradScaler& s, torch::nn::Sequential& m, torch::optim::Optimizer& opt,
              bool inject_inf = false) {
  opt.zero_grad();
  auto x = torch::randn({5, 4});
  auto y = torch::randint(0, 3, {5}, torch::kLong);
  s.scale(loss_of(m, x, y)).backward();
  if (inject_inf) m->parameters()[0].grad().view(-1)[1].fill_(INFINITY);
}

std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// Every Adam state tensor (the state map is keyed differently across LibTorch
// versions; its iteration order is stable while no entry is added).
std::vector<torch::Tensor> adam_state(torch::optim::Adam& opt) {
  std::vector<torch::Tensor> out;
  for (auto& item : opt.state()) {
    auto& st = static_cast<torch::optim::AdamParamState&>(*item.second);
    out.push_back(st.exp_avg().clone());
    out.push_back(st.exp_avg_sq().clone());
    out.push_back(torch::tensor(st.step()));
  }
  return out;
}

}  // namespace

TEST_CASE("precision: policy table for every Lightning name and alias") {
  struct Want { const char* name; bool ac; c10::ScalarType ad, pd; bool gs; };
  const Want want[] = {
      {"32-true", false, torch::kFloat, torch::kFloat, false},
      {"bf16-mixed", true, torch::kBFloat16, torch::kFloat, false},
      {"16-mixed", true, torch::kHalf, torch::kFloat, true},
      {"bf16-true", false, torch::kBFloat16, torch::kBFloat16, false},
      {"16-true", false, torch::kHalf, torch::kHalf, false},
      {"64-true", false, torch::kDouble, torch::kDouble, false},
  };
  CHECK(ap::policy_names().size() == 6);
  for (const auto& w : want) {
    INFO(w.name);
    const auto p = ap::make_policy(w.name);
    CHECK(p.name == w.name);
    CHECK(p.autocast == w.ac);
    CHECK((p.autocast_dtype == w.ad));
    CHECK((p.param_dtype == w.pd));
    CHECK(p.use_grad_scaler == w.gs);
  }
  CHECK(ap::make_policy("16").name == "16-mixed");
  CHECK(ap::make_policy("bf16").name == "bf16-mixed");
  CHECK(ap::make_policy("32").name == "32-true");
  CHECK(ap::make_policy("64").name == "64-true");
  CHECK_THROWS_AS(ap::make_policy("fp8"), ConfigError);
  CHECK_THROWS_WITH(ap::make_policy("bf16-fast"), doctest::Contains("bf16-mixed"));
}

TEST_CASE("precision: unsupported device and precision pairs are config errors") {
  for (const char* ok : {"32-true", "bf16-mixed", "bf16-true", "64-true"}) {
    INFO(ok);
    CHECK_NOTHROW(ap::check_supported(ap::make_policy(ok), DeviceType::CPU));
  }
  CHECK_THROWS_WITH_AS(ap::check_supported(ap::make_policy("16"), DeviceType::CPU),
                       doctest::Contains("runtime.precision: \"16-mixed\" (fp16 autocast"),
                       ConfigError);
  if (compat::cpu_half_kernels()) {
    CHECK_NOTHROW(ap::check_supported(ap::make_policy("16-true"), DeviceType::CPU));
  } else {
    CHECK_THROWS_WITH_AS(ap::check_supported(ap::make_policy("16-true"), DeviceType::CPU),
                         doctest::Contains("needs fp16 kernels on cpu"), ConfigError);
  }
  for (const auto& name : ap::policy_names())
    CHECK_NOTHROW(ap::check_supported(ap::make_policy(name), DeviceType::CUDA));
  CHECK_THROWS_AS(ap::check_supported(ap::make_policy("32-true"), DeviceType::MPS), ConfigError);
  INFO("LibTorch " << compat::torch_version());  // the per-version answer agrees with a probe
  CHECK(compat::cpu_half_kernels() == compat::probe_cpu_half_kernels());
}

TEST_CASE("precision: AutocastGuard enables and restores autocast state") {
  const auto cpu = DeviceType::CPU, cuda = DeviceType::CUDA;
  REQUIRE_FALSE(compat::autocast_enabled(cpu));
  const auto cpu_dtype = compat::autocast_dtype(cpu), cuda_dtype = compat::autocast_dtype(cuda);
  {
    ap::AutocastGuard off(ap::make_policy("32-true"), cpu);  // no autocast: a no-op
    CHECK_FALSE(compat::autocast_enabled(cpu));
  }
  {
    ap::AutocastGuard outer(ap::make_policy("bf16-mixed"), cpu);
    CHECK(compat::autocast_enabled(cpu));
    CHECK((compat::autocast_dtype(cpu) == torch::kBFloat16));
    CHECK_FALSE(compat::autocast_enabled(cuda));
    {
      ap::AutocastGuard inner(cpu, torch::kBFloat16, /*enabled=*/false);
      CHECK_FALSE(compat::autocast_enabled(cpu));
      CHECK(compat::autocast_increment_nesting() == 3);  // outer, inner, this call
      CHECK(compat::autocast_decrement_nesting() == 2);
    }
    CHECK(compat::autocast_enabled(cpu));
    // CUDA autocast state is thread-local too and settable on a CPU build.
    {
      ap::AutocastGuard gpu(ap::make_policy("16-mixed"), cuda);
      CHECK(compat::autocast_enabled(cuda));
      CHECK((compat::autocast_dtype(cuda) == torch::kHalf));
    }
    CHECK_FALSE(compat::autocast_enabled(cuda));
  }
  CHECK_FALSE(compat::autocast_enabled(cpu));
  CHECK((compat::autocast_dtype(cpu) == cpu_dtype));
  CHECK((compat::autocast_dtype(cuda) == cuda_dtype));
  CHECK(compat::autocast_increment_nesting() == 1);
  CHECK(compat::autocast_decrement_nesting() == 0);
  // fp16 on CPU: 1.13 refuses the dtype (c10::Error); the state must be untouched either way.
  try {
    ap::AutocastGuard half(cpu, torch::kHalf);
    CHECK((compat::autocast_dtype(cpu) == torch::kHalf));
  } catch (const c10::Error&) {
  }
  CHECK_FALSE(compat::autocast_enabled(cpu));
  CHECK((compat::autocast_dtype(cpu) == cpu_dtype));
}

TEST_CASE("precision: leaving the outermost AutocastGuard clears the weight cast cache") {
  auto w = torch::randn({4, 4}).requires_grad_();  // a leaf weight: its bf16 copy is cached
  auto x = torch::randn({2, 4});
  const auto bf16 = ap::make_policy("bf16-mixed");
  torch::Tensor before, stale, fresh;
  {
    ap::AutocastGuard g(bf16, DeviceType::CPU);
    before = torch::mm(x, w);
    torch::NoGradGuard no_grad;
    w.add_(1.0);
    stale = torch::mm(x, w);  // same region: the cached copy of the old w
  }
  {
    ap::AutocastGuard g(bf16, DeviceType::CPU);
    fresh = torch::mm(x, w);
  }
  CHECK(torch::equal(before, stale));
  CHECK_FALSE(torch::equal(before, fresh));
}

TEST_CASE("precision: bf16-mixed runs matmuls in bf16 and modules in train and eval") {
  torch::manual_seed(3);
  const auto policy = ap::make_policy("bf16-mixed");
  auto m = mlp(3);
  auto x = torch::randn({6, 4});
  auto y = torch::randint(0, 3, {6}, torch::kLong);
  for (bool train : {true, false}) {
    INFO("train=" << train);
    m->train(train);
    ap::AutocastGuard g(policy, DeviceType::CPU);
    CHECK((torch::matmul(x, x.t()).scalar_type() == torch::kBFloat16));
    auto out = m->forward(ap::cast_input(policy, x));
    CHECK((out.scalar_type() == torch::kBFloat16));
    CHECK((ap::cast_output(policy, out).scalar_type() == torch::kFloat));
    auto loss = torch::cross_entropy_loss(out, y);
    CHECK((loss.scalar_type() == torch::kFloat));  // autocast keeps losses in fp32
    if (train) {
      loss.backward();
      for (const auto& p : m->parameters()) CHECK((p.grad().scalar_type() == torch::kFloat));
    }
  }
}

TEST_CASE("precision: vit_tiny_fmnist under bf16-mixed is close to fp32 in train and eval") {
  torch::manual_seed(5);
  accel::models::VisionTransformer model(accel::models::vit_preset("vit_tiny_fmnist"));
  {
    torch::NoGradGuard no_grad;  // the head starts at zero (torchvision): give it weights
    model->head->weight.normal_(0.0, 0.1);
  }
  const auto policy = ap::make_policy("bf16-mixed");
  auto x = torch::randn({8, 1, 56, 56});
  for (bool train : {true, false}) {
    INFO("train=" << train);
    model->train(train);
    torch::NoGradGuard no_grad;
    auto ref = model->forward(x);
    torch::Tensor amp;
    {
      ap::AutocastGuard g(policy, DeviceType::CPU);
      amp = model->forward(ap::cast_input(policy, x));
    }
    CHECK((amp.scalar_type() == torch::kBFloat16));
    const double err = (ap::cast_output(policy, amp) - ref).abs().max().item<double>();
    const double mag = ref.abs().max().item<double>();
    INFO("max abs err " << err << " of max |logit| " << mag);
    CHECK(err <= 0.03 * mag + 1e-3);
    CHECK(torch::argmax(ap::cast_output(policy, amp), 1).eq(torch::argmax(ref, 1)).sum()
              .item<int64_t>() >= 6);
  }
}

TEST_CASE("precision: bf16-true and 64-true cast weights and inputs and optimizer state") {
  for (const char* name : {"bf16-true", "64-true"}) {
    INFO(name);
    const auto policy = ap::make_policy(name);
    auto spec = accel::models::vit_preset("vit_tiny_fmnist");
    spec.depth = 1;
    accel::models::VisionTransformer model(spec);
    ap::cast_module(policy, *model);
    for (const auto& p : model->parameters()) CHECK((p.scalar_type() == policy.param_dtype));
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
    auto x = ap::cast_input(policy, torch::randn({2, 1, 56, 56}));
    CHECK((x.scalar_type() == policy.param_dtype));
    auto labels = torch::tensor({1, 2}, torch::kLong);
    CHECK((ap::cast_input(policy, labels).scalar_type() == torch::kLong));
    ap::AutocastGuard g(policy, DeviceType::CPU);  // no-op for *-true
    auto loss = torch::cross_entropy_loss(model->forward(x), labels);
    loss.backward();
    opt.step();
    auto& st = static_cast<torch::optim::AdamParamState&>(*opt.state().begin()->second);
    CHECK((st.exp_avg().scalar_type() == policy.param_dtype));
    CHECK(std::isfinite(ap::cast_output(policy, loss).item<double>()));
  }
}

TEST_CASE("precision: GradScaler grows after growth_interval clean steps and backs off on inf") {
  auto m = mlp(7);
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1));
  ap::GradScaler s(true, /*init_scale=*/8.0, 2.0, 0.5, /*growth_interval=*/3);
  auto run = [&](bool inf) {
    backward(s, m, opt, inf);
    const bool stepped = s.step(opt);
    s.update();
    return stepped;
  };
  CHECK(run(false));
  CHECK(run(false));
  CHECK(s.get_scale() == 8.0);
  CHECK(s.growth_tracker() == 2);
  CHECK(run(false));  // third clean step in a row: grow
  CHECK(s.get_scale() == 16.0);
  CHECK(s.growth_tracker() == 0);
  CHECK(run(false));
  CHECK(run(false));
  CHECK_FALSE(run(true));  // inf: skip, back off, reset the tracker
  CHECK(s.get_scale() == 8.0);
  CHECK(s.growth_tracker() == 0);
  CHECK_FALSE(run(true));
  CHECK(s.get_scale() == 4.0);
  for (int i = 0; i < 3; ++i) CHECK(run(false));
  CHECK(s.get_scale() == 8.0);
  // The scale never grows past fp32's range (as _amp_update_scale_).
  ap::GradScaler big(true, std::ldexp(1.0, 127), 2.0, 0.5, 1);
  backward(big, m, opt);
  big.step(opt);
  big.update();
  CHECK(big.get_scale() == std::ldexp(1.0, 127));
  CHECK_THROWS_AS(ap::GradScaler(true, 0.0), ConfigError);
  CHECK_THROWS_AS(ap::GradScaler(true, 8.0, 1.0), ConfigError);
  CHECK_THROWS_AS(ap::GradScaler(true, 8.0, 2.0, 1.0), ConfigError);
  CHECK_THROWS_AS(ap::GradScaler(true, 8.0, 2.0, 0.5, 0), ConfigError);
}

TEST_CASE("precision: GradScaler skips a step with an inf or NaN gradient") {
  auto m = mlp(11);
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(1e-2));
  ap::GradScaler s(true);
  backward(s, m, opt);
  REQUIRE(s.step(opt));  // a clean step first, so Adam has state
  s.update();
  for (float bad : {INFINITY, NAN}) {
    INFO("bad=" << bad);
    const double scale = s.get_scale();
    const auto params = snapshot(m->parameters());
    const auto state = adam_state(opt);
    backward(s, m, opt);
    m->parameters()[2].grad().view(-1)[0].fill_(bad);
    CHECK_FALSE(s.step(opt));
    CHECK(s.found_inf());
    s.update();
    CHECK(all_equal(params, snapshot(m->parameters())));
    CHECK(all_equal(state, adam_state(opt)));
    CHECK(s.get_scale() == scale / 2);
  }
}

TEST_CASE("precision: a clean scaled step updates parameters exactly as an unscaled one") {
  auto m = mlp(13), ref = mlp(13);
  const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9);
  torch::optim::SGD opt(m->parameters(), sgd), ref_opt(ref->parameters(), sgd);
  ap::GradScaler s(true);
  for (int step = 0; step < 4; ++step) {
    auto x = torch::randn({5, 4});
    auto y = torch::randint(0, 3, {5}, torch::kLong);
    opt.zero_grad();
    ref_opt.zero_grad();
    s.scale(loss_of(m, x, y)).backward();
    loss_of(ref, x, y).backward();
    s.unscale_(opt);  // before clipping: the gradients are the true ones
    CHECK(all_equal(snapshot({m->parameters()[0].grad()}), snapshot({ref->parameters()[0].grad()})));
    CHECK_THROWS_AS(s.unscale_(opt), RunError);  // once per step
    torch::nn::utils::clip_grad_norm_(m->parameters(), 1.0);
    torch::nn::utils::clip_grad_norm_(ref->parameters(), 1.0);
    CHECK(s.step(opt));  // does not unscale again
    CHECK_THROWS_AS(s.step(opt), RunError);
    ref_opt.step();
    s.update();
    CHECK(all_equal(snapshot(m->parameters()), snapshot(ref->parameters())));
  }
  CHECK_THROWS_AS(s.update(), RunError);  // no inf check since the last update
}

TEST_CASE("precision: GradScaler state_dict round trip and validation") {
  auto m = mlp(17);
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1));
  ap::GradScaler s(true, 1024.0, 4.0, 0.25, 5);
  for (bool inf : {false, true, false, false}) {
    backward(s, m, opt, inf);
    s.step(opt);
    s.update();
  }
  const auto st = s.state_dict();
  CHECK(st["scale"].get<double>() == 256.0);
  CHECK(st["growth_tracker"].get<int64_t>() == 2);
  ap::GradScaler t(true);
  t.load_state_dict(nlohmann::json::parse(st.dump()));
  CHECK(t.state_dict() == st);
  CHECK(t.get_scale() == 256.0);
  CHECK(t.growth_tracker() == 2);
  auto bad = [&](const char* key, nlohmann::json v) {
    auto b = st;
    if (v.is_null()) b.erase(key); else b[key] = v;
    INFO(b.dump());
    CHECK_THROWS_AS(t.load_state_dict(b), ConfigError);
  };
  bad("scale", nullptr);
  bad("scale", "big");
  bad("scale", -1.0);
  bad("growth_factor", 0.5);
  bad("backoff_factor", 1.5);
  bad("growth_interval", 2.5);
  bad("growth_interval", 0);
  bad("growth_tracker", 5);
  CHECK_THROWS_AS(t.load_state_dict(nlohmann::json::object()), ConfigError);
  CHECK(t.state_dict() == st);  // failed loads change nothing
  ap::GradScaler off(false);
  CHECK(off.state_dict() == nlohmann::json::object());
  CHECK_NOTHROW(off.load_state_dict(st));
  CHECK(off.get_scale() == 1.0);
}

TEST_CASE("precision: reduce_found_inf decides the skip on every rank") {
  auto m = mlp(19);
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1));
  ap::GradScaler s(true);
  int calls = 0;
  float seen = -1.0f;
  bool other_rank_inf = false;
  s.reduce_found_inf = [&](torch::Tensor& found) {  // an all-reduce MAX with one other rank
    ++calls;
    seen = found.item<float>();
    found = torch::maximum(found, torch::full_like(found, other_rank_inf ? 1.0f : 0.0f));
  };
  backward(s, m, opt);
  CHECK(s.step(opt));
  s.update();
  CHECK(calls == 1);
  CHECK(seen == 0.0f);
  other_rank_inf = true;  // local gradients clean, another rank saw inf
  const auto params = snapshot(m->parameters());
  backward(s, m, opt);
  CHECK_FALSE(s.step(opt));
  s.update();
  CHECK(calls == 2);
  CHECK(seen == 0.0f);
  CHECK(all_equal(params, snapshot(m->parameters())));
  CHECK(s.get_scale() == 32768.0);
  other_rank_inf = false;  // local inf is reported to the hook
  backward(s, m, opt, /*inject_inf=*/true);
  CHECK_FALSE(s.step(opt));
  CHECK(seen == 1.0f);
}

TEST_CASE("precision: a disabled GradScaler is a pass-through") {
  auto m = mlp(23);
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1));
  ap::GradScaler s(false);
  bool called = false;
  s.reduce_found_inf = [&](torch::Tensor&) { called = true; };
  auto loss = loss_of(m, torch::randn({3, 4}), torch::tensor({0, 1, 2}, torch::kLong));
  CHECK(s.scale(loss).is_same(loss));
  loss.backward();
  const auto grads = snapshot({m->parameters()[0].grad()});
  const auto params = snapshot(m->parameters());
  s.unscale_(opt);
  CHECK(all_equal(grads, snapshot({m->parameters()[0].grad()})));
  CHECK(s.step(opt));
  CHECK_FALSE(all_equal(params, snapshot(m->parameters())));
  CHECK_NOTHROW(s.update());
  CHECK_NOTHROW(s.update());
  CHECK(s.get_scale() == 1.0);
  CHECK_FALSE(s.enabled());
  CHECK_FALSE(called);
}

TEST_CASE("precision: GradScaler refuses fp16 gradients") {
  auto p = torch::zeros({3}).to(torch::kHalf).requires_grad_();
  p.mutable_grad() = torch::ones({3}).to(torch::kHalf);
  torch::optim::SGD opt(std::vector<torch::Tensor>{p}, torch::optim::SGDOptions(0.1));
  ap::GradScaler s(true);
  CHECK_THROWS_WITH_AS(s.unscale_(opt), doctest::Contains("fp16 gradients"), RunError);
}

TEST_CASE("precision catalog: the policies, the peaks' matmul dtype and the CPU's judgement read its rows, aliases included") {
  namespace ap = accel::precision;
  CHECK(ap::precision_names() == ap::policy_names());
  for (const auto& row : ap::precision_catalog()) {
    INFO(row.name);
    const auto p = ap::make_policy(row.name);
    CHECK(p.autocast == row.autocast);
    CHECK(p.use_grad_scaler == row.scaler);
    CHECK(accel::machine::matmul_dtype(row.name) == row.compute);
    // A CPU without AVX512-BF16/-FP16 or AMX emulates exactly the 16-bit rows.
    CHECK(accel::metrics::precision_support(row.name, "cpu", accel::metrics::CpuFeatures{}).emulated() ==
          !row.low().empty());
    CHECK_FALSE(accel::metrics::precision_support(row.name, "cuda", accel::metrics::CpuFeatures{}).emulated());
  }
  for (const auto& [alias, name] : ap::precision_aliases()) {
    INFO(alias);
    REQUIRE(ap::find_precision(alias) != nullptr);
    CHECK(ap::find_precision(alias)->name == name);
    CHECK(accel::machine::matmul_dtype(alias) == accel::machine::matmul_dtype(name));
    CHECK(accel::metrics::precision_support(alias, "cpu", accel::metrics::CpuFeatures{}).emulated() ==
          accel::metrics::precision_support(name, "cpu", accel::metrics::CpuFeatures{}).emulated());
  }
  CHECK(ap::find_precision("fp8") == nullptr);
  CHECK(accel::machine::matmul_dtype("fp8") == "fp32");
}
