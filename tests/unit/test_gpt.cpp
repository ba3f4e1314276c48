// The decoder-only language models (accel/models/gpt.h): presets' parameter
// counts and Hugging Face names, shapes, causality, rotary positions, grouped
// key-value heads, the FLOPs rule MFU is reported by, a model that learns, and
// the chunked loss a model makes from labels.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>

#include "accel/models/attention.h"
#include "accel/models/family.h"
#include "accel/models/gpt.h"
#include "accel/models/linear_cross_entropy.h"
#include "accel/precision/precision.h"
#include "accel/util/errors.h"

namespace am = accel::models;

namespace {

std::set<std::string> parameter_names(torch::nn::Module& m) {
  std::set<std::string> out;
  for (const auto& kv : m.named_parameters(true)) out.insert(kv.key());
  return out;
}

am::DecoderSpec small(const std::string& preset, int64_t vocab = 96) {
  auto s = am::decoder_preset(preset);
  s.vocab_size = vocab;
  return s;
}

struct ImplGuard {
  ~ImplGuard() { am::set_attention_impl(am::AttentionImpl::Auto); }
};

}  // namespace

TEST_CASE("gpt: GPT-2 124M and SmolLM2-135M presets build with their published parameter counts") {
  torch::NoGradGuard no_grad;
  struct Row { const char* preset; int64_t params; };
  // GPT-2 small: 124,439,808 (tied lm_head); SmolLM2-135M: 134,515,008.
  for (const Row r : {Row{"gpt2", 124439808}, Row{"smollm2_135m", 134515008}}) {
    CAPTURE(r.preset);
    const auto spec = am::decoder_preset(r.preset);
    CHECK(am::decoder_param_count(spec) == r.params);
    am::DecoderLM model(spec);
    CHECK(am::count_parameters(*model) == r.params);
  }
  // The tiny presets: the formula and the module agree, tied or not.
  for (const char* p : {"gpt_tiny", "llama_tiny"}) {
    for (const bool tied : {true, false}) {
      auto spec = small(p);
      spec.tie_embeddings = tied;
      am::DecoderLM model(spec);
      CHECK(am::count_parameters(*model) == am::decoder_param_count(spec));
    }
  }
}

TEST_CASE("gpt: parameter names are transformers' GPT2LMHeadModel and LlamaForCausalLM names") {
  am::DecoderLM gpt(small("gpt_tiny"));
  const auto g = parameter_names(*gpt);
  for (const char* n : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                        "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
                        "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
                        "transformer.h.0.ln_2.weight", "transformer.h.3.mlp.c_fc.weight",
                        "transformer.h.3.mlp.c_proj.bias", "transformer.ln_f.weight", "transformer.ln_f.bias"}) {
    CHECK_MESSAGE(g.count(n) == 1, n);
  }
  CHECK(g.size() == 2 + 4 * 12 + 2);  // GPT-2's 12 tensors a block; lm_head tied
  CHECK(g.count("lm_head.weight") == 0);
  am::DecoderLM llama(small("llama_tiny"));
  const auto l = parameter_names(*llama);
  for (const char* n : {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                        "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
                        "model.layers.0.post_attention_layernorm.weight", "model.layers.3.mlp.gate_proj.weight",
                        "model.layers.3.mlp.up_proj.weight", "model.layers.3.mlp.down_proj.weight",
                        "model.norm.weight"}) {
    CHECK_MESSAGE(l.count(n) == 1, n);
  }
  CHECK(l.size() == 1 + 4 * 9 + 1);
  // Grouped key-value heads: k and v project to kv_heads x head size.
  CHECK(llama->blocks[0]->k->weight.sizes() == torch::IntArrayRef({2 * 32, 128}));
  // Every parameter in exactly one wrap unit, embeddings first, the final norm last.
  for (am::Model* m : {static_cast<am::Model*>(gpt.get()), static_cast<am::Model*>(llama.get())}) {
    const auto units = m->wrap_units();
    REQUIRE(units.size() == 6);
    size_t n = 0;
    for (const auto& u : units) n += u.params.size();
    CHECK(n == m->named_parameters(true).size());
    CHECK(units.back().params.size() == (m == gpt.get() ? 2U : 1U));
  }
}

TEST_CASE("gpt: logits are [batch, seq, vocab] and too long a sequence or a bad spec is refused naming the field") {
  torch::manual_seed(1);
  am::DecoderLM model(small("gpt_tiny"));
  const auto ids = torch::randint(0, 96, {3, 10}, torch::kLong);
  CHECK(model->forward(ids, {}).sizes() == torch::IntArrayRef({3, 10, 96}));
  CHECK(model->hidden_states(ids, {}).sizes() == torch::IntArrayRef({3, 10, 128}));
  CHECK_THROWS_WITH_AS(model->forward(torch::zeros({1, 257}, torch::kLong), {}),
                       doctest::Contains("exceed model.max_positions 256"), std::invalid_argument);
  auto bad = small("llama_tiny");
  bad.kv_heads = 3;
  CHECK_THROWS_WITH_AS(am::DecoderLM{bad}, doctest::Contains("model.kv_heads: 3 does not divide model.heads 4"),
                       accel::ConfigError);
  bad = small("gpt_tiny");
  bad.norm = "batchnorm";
  CHECK_THROWS_WITH_AS(am::DecoderLM{bad}, doctest::Contains("model.norm"), accel::ConfigError);
  CHECK_THROWS_WITH_AS(am::decoder_preset("gpt5"), doctest::Contains("known: gpt_tiny, gpt2"), accel::ConfigError);
}

TEST_CASE("gpt: a token's logits never depend on later tokens and the fused and explicit attention agree") {
  ImplGuard restore;
  for (const char* preset : {"gpt_tiny", "llama_tiny"}) {
    CAPTURE(preset);
    torch::manual_seed(2);
    am::DecoderLM model(small(preset));
    model->eval();
    torch::NoGradGuard g;
    const auto ids = torch::randint(0, 96, {2, 70}, torch::kLong);  // across the kernel's 64-row blocks
    const auto out = model->forward(ids, {});
    auto changed = ids.clone();
    changed.select(1, 40).fill_(0);
    changed.select(1, 69).fill_(1);
    const auto out2 = model->forward(changed, {});
    CHECK(torch::equal(out.narrow(1, 0, 40), out2.narrow(1, 0, 40)));
    CHECK_FALSE(torch::equal(out.narrow(1, 40, 30), out2.narrow(1, 40, 30)));
    am::set_attention_impl(am::AttentionImpl::Explicit);
    const auto ref = model->forward(ids, {});
    am::set_attention_impl(am::AttentionImpl::Auto);
    CHECK((out - ref).abs().max().item<double>() < 1e-4);
    // A padded document reads like the same document alone.
    auto mask = torch::ones({2, 70}, torch::kLong);
    mask[1].narrow(0, 30, 40).fill_(0);
    const auto padded = model->forward(ids, mask);
    const auto alone = model->forward(ids[1].narrow(0, 0, 30).unsqueeze(0), {});
    CHECK((padded[1].narrow(0, 0, 30) - alone[0]).abs().max().item<double>() < 1e-4);
  }
}

TEST_CASE("gpt: rotary positions leave position 0 alone and make q.k depend on the distance only") {
  const auto [cos, sin] = am::rotary_tables(16, 8, 10000.0, torch::kFloat);
  CHECK(cos.sizes() == torch::IntArrayRef({16, 8}));
  torch::manual_seed(3);
  const auto q = torch::randn({8}), k = torch::randn({8});
  // x [1, S, 1, Dh]: the same vector at every position.
  const auto qr = am::apply_rotary(q.expand({1, 16, 1, 8}).contiguous(), cos, sin);
  const auto kr = am::apply_rotary(k.expand({1, 16, 1, 8}).contiguous(), cos, sin);
  CHECK(torch::allclose(qr[0][0][0], q, 0.0, 1e-7));
  auto dot = [&](int m, int n) { return (qr[0][m][0] * kr[0][n][0]).sum().item<double>(); };
  CHECK(dot(5, 2) == doctest::Approx(dot(12, 9)).epsilon(1e-5));
  CHECK(dot(7, 7) == doctest::Approx((q * k).sum().item<double>()).epsilon(1e-5));
  CHECK(dot(5, 2) != doctest::Approx(dot(5, 4)).epsilon(1e-3));
  // Rotation keeps each pair's length.
  CHECK(qr[0][9][0].norm().item<double>() == doctest::Approx(q.norm().item<double>()).epsilon(1e-6));
}

TEST_CASE("gpt: grouped key-value heads equal full heads whose key and value rows repeat per group") {
  torch::manual_seed(4);
  auto grouped = small("llama_tiny");  // 4 heads, 2 key-value heads of 32
  auto full = grouped;
  full.kv_heads = full.heads;
  am::DecoderLM a(grouped), b(full);
  torch::NoGradGuard g;
  auto pa = a->named_parameters(true), pb = b->named_parameters(true);
  for (const auto& kv : pa) {
    const auto& name = kv.key();
    auto& dst = pb[name];
    if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos) {
      // [2 groups x 32, 128] -> each group's rows twice, consecutively (heads 0,1 read group 0).
      dst.copy_(kv.value().view({2, 1, 32, 128}).expand({2, 2, 32, 128}).reshape({128, 128}));
    } else {
      dst.copy_(kv.value());
    }
  }
  const auto ids = torch::randint(0, 96, {2, 12}, torch::kLong);
  CHECK((a->forward(ids, {}) - b->forward(ids, {})).abs().max().item<double>() < 1e-5);
}

TEST_CASE("gpt: analytic FLOPs agree with the 6N plus attention rule within 1% for every preset") {
  for (const auto& name : am::decoder_preset_names()) {
    CAPTURE(name);
    const auto spec = am::decoder_preset(name);
    for (const int64_t seq : {int64_t(128), int64_t(1024)}) {
      CAPTURE(seq);
      const double ours = 3.0 * am::decoder_forward_flops(spec, seq) / double(seq);
      const double rule = am::decoder_training_flops_per_token_rule(spec, seq);
      CHECK(std::abs(ours / rule - 1.0) < 0.01);
    }
  }
  // GPT-2 124M at 1024 tokens: nanoGPT's own figure, 6N + 12 L H T with
  // N = 123,653,376 (without the position table): 1.0035e9 FLOPs a token.
  const auto gpt2 = am::decoder_preset("gpt2");
  CHECK(am::decoder_training_flops_per_token_rule(gpt2, 1024) ==
        doctest::Approx(6.0 * 123653376 + 12.0 * 12 * 768 * 1024));
}

TEST_CASE("gpt: both styles learn a repeated sequence and the loss falls") {
  for (const char* preset : {"gpt_tiny", "llama_tiny"}) {
    CAPTURE(preset);
    torch::manual_seed(5);
    auto spec = small(preset, 32);
    spec.layers = 2;
    am::DecoderLM model(spec);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
    const auto seq = torch::arange(0, 33, torch::kLong).remainder(7).unsqueeze(0).repeat({4, 1});
    const auto x = seq.narrow(1, 0, 32), y = seq.narrow(1, 1, 32);
    double first = 0, last = 0;
    for (int step = 0; step < 40; ++step) {
      opt.zero_grad();
      const auto loss = torch::cross_entropy_loss(model->forward(x, {}).flatten(0, 1), y.flatten());
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    CAPTURE(first);
    CAPTURE(last);
    CHECK(first > 3.0);  // about ln 32 at init
    CHECK(last < 0.5);
  }
}

TEST_CASE("gpt: the chunked linear cross-entropy equals the cross-entropy of the whole logits and so do its gradients") {
  torch::manual_seed(7);
  const int64_t N = 37, H = 16, V = 50;
  const auto h0 = torch::randn({N, H}), w0 = torch::randn({V, H});
  auto y = torch::randint(0, V, {N}, torch::kLong);
  y.narrow(0, 5, 3).fill_(-100);  // no next token there (padding)
  auto h_ref = h0.clone().requires_grad_(true), w_ref = w0.clone().requires_grad_(true);
  const auto ref = torch::cross_entropy_loss(torch::mm(h_ref, w_ref.t()), y, {}, at::Reduction::Mean, -100);
  (ref * 2.5).backward();
  for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(8), int64_t(37), int64_t(100)}) {
    CAPTURE(chunk);
    auto h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const auto loss = am::linear_cross_entropy(h, w, y, chunk);
    CHECK((loss.scalar_type() == torch::kFloat));
    CHECK(loss.item<double>() == doctest::Approx(ref.item<double>()).epsilon(1e-6));
    (loss * 2.5).backward();  // the incoming gradient scales both
    CHECK((h.grad() - h_ref.grad()).abs().max().item<double>() < 1e-6);
    CHECK((w.grad() - w_ref.grad()).abs().max().item<double>() < 1e-6);
    CHECK(h.grad().select(0, 6).abs().max().item<double>() == 0.0);  // an ignored token has no gradient
    torch::NoGradGuard no_grad;
    CHECK(am::linear_cross_entropy(h, w, y, chunk).item<double>() == doctest::Approx(ref.item<double>()).epsilon(1e-6));
  }
  // Every label ignored: NaN, as cross_entropy's mean; a shape that cannot project is refused.
  CHECK(std::isnan(am::linear_cross_entropy(h0, w0, torch::full({N}, -100, torch::kLong), 8).item<double>()));
  CHECK_THROWS_AS(am::linear_cross_entropy(h0, torch::randn({V, H + 1}), y, 8), std::invalid_argument);
  CHECK_THROWS_AS(am::linear_cross_entropy(h0, w0, y.narrow(0, 0, N - 1), 8), std::invalid_argument);
}

TEST_CASE("gpt: under bf16 autocast the chunked loss runs its matmuls in bf16 like the whole logits' loss") {
  torch::manual_seed(8);
  const auto h0 = torch::randn({64, 32}), w0 = torch::randn({200, 32}) * 0.1;
  const auto y = torch::randint(0, 200, {64}, torch::kLong);
  auto h_ref = h0.clone().requires_grad_(true), h = h0.clone().requires_grad_(true);
  auto w_ref = w0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  torch::Tensor ref, loss;
  {
    accel::precision::AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16);
    ref = torch::cross_entropy_loss(torch::mm(h_ref, w_ref.t()).to(torch::kFloat), y);
    loss = am::linear_cross_entropy(h, w, y, 16);
  }
  // The products in bf16 (8 bits of mantissa): the fp32 loss differs from both by far more than theirs from each other.
  const double fp32 = torch::cross_entropy_loss(torch::mm(h0, w0.t()), y).item<double>();
  CHECK(std::abs(loss.item<double>() - ref.item<double>()) < 1e-5);
  CHECK(std::abs(loss.item<double>() - fp32) > 1e-5);
  ref.backward();
  loss.backward();
  CHECK((h.grad().scalar_type() == torch::kFloat));
  CHECK((h.grad() - h_ref.grad()).abs().max().item<double>() < 2e-2 * h_ref.grad().abs().max().item<double>());
  CHECK((w.grad() - w_ref.grad()).abs().max().item<double>() < 2e-2 * w_ref.grad().abs().max().item<double>());
}

TEST_CASE("gpt: the loss the model makes from labels equals the loss of its logits with the same gradients tied or untied") {
  for (const char* preset : {"gpt_tiny", "llama_tiny"}) {
    CAPTURE(preset);
    torch::manual_seed(9);
    auto spec = small(preset);
    spec.layers = 2;
    spec.tie_embeddings = std::string(preset) == "gpt_tiny";  // llama's lm_head its own
    am::DecoderLM model(spec);
    CHECK(model->make_own_loss(7));
    const auto ids = torch::randint(0, 96, {3, 12}, torch::kLong);
    auto y = torch::randint(0, 96, {3, 12}, torch::kLong);
    y[2].narrow(0, 8, 4).fill_(-100);
    const auto ref = torch::cross_entropy_loss(model->forward(ids, {}).flatten(0, 1), y.flatten(), {},
                                               at::Reduction::Mean, -100);
    ref.backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : model->parameters()) {
      grads.push_back(p.grad().clone());
      p.mutable_grad() = torch::Tensor();
    }
    const auto loss = model->forward(accel::data::Inputs{{"input_ids", ids}, {"labels", y}});
    CHECK(loss.dim() == 0);
    CHECK(loss.item<double>() == doctest::Approx(ref.item<double>()).epsilon(1e-6));
    loss.backward();
    size_t i = 0;
    for (auto& p : model->parameters()) {
      CHECK((p.grad() - grads[i]).abs().max().item<double>() < 1e-5 * (1 + grads[i].abs().max().item<double>()));
      ++i;
    }
    CHECK_THROWS_AS(model->forward(accel::data::Inputs{{"input_ids", ids}, {"labels", y.narrow(1, 0, 11)}}),
                    std::invalid_argument);
  }
}

TEST_CASE("gpt: a model that makes its own loss in chunks drops the whole logits from its activation estimate") {
  accel::config::ModelConfig m;
  m.arch = "gpt";
  m.preset = "gpt_tiny";
  am::DataFacts facts;
  facts.kind = "tokens";
  facts.max_length = 32;
  facts.vocab_size = 500;
  const auto built = am::model_family("gpt").build(m, facts);
  // The logits and their gradient in fp32, one sample's 32 tokens over 500 ids.
  CHECK(built.head_bytes_per_sample == doctest::Approx(2.0 * 4.0 * 32 * 500));
  CHECK(built.activation_bytes_per_sample > built.head_bytes_per_sample);
  CHECK(built.module->make_own_loss(16));
  // Another family cannot: it answers so and the core keeps the logits.
  accel::config::ModelConfig v;
  v.arch = "vit";
  v.preset = "vit_tiny_fmnist";
  am::DataFacts images;
  images.kind = "image";
  images.classes = 10;
  images.channels = 1;
  images.image_size = 28;
  CHECK_FALSE(am::model_family("vit").build(v, images).module->make_own_loss(16));
}

TEST_CASE("gpt: recomputing the blocks in the backward gives the losses and gradients of keeping their activations, dropout's masks and the generator included") {
  // Dropout 0.2: the recomputed blocks must draw the forward's masks again;
  // dropout 0: nothing drawn, so the generator's state is not kept at all.
  for (const auto& [bf16, dropout] : {std::pair{false, 0.2}, std::pair{true, 0.2}, std::pair{false, 0.0},
                                      std::pair{true, 0.0}}) {
    CAPTURE(bf16);
    CAPTURE(dropout);
    auto spec = small("llama_tiny");
    spec.layers = 3;
    spec.dropout = dropout;
    torch::manual_seed(4);
    am::DecoderLM kept(spec);
    torch::manual_seed(4);
    am::DecoderLM again(spec);
    CHECK(again->recompute_blocks(true));
    kept->train();
    again->train();
    const auto ids = torch::randint(0, 96, {2, 16}, torch::kLong);
    const auto y = torch::randint(0, 96, {2, 16}, torch::kLong);
    auto step = [&](am::DecoderLM& m) {
      torch::manual_seed(77);
      torch::Tensor loss;
      {
        accel::precision::AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, bf16);
        loss = torch::cross_entropy_loss(m->forward(ids, {}).flatten(0, 1).to(torch::kFloat), y.flatten());
      }
      loss.backward();
      return std::make_pair(loss.item<double>(), torch::rand({4}));  // what the run draws next
    };
    const auto [loss_kept, next_kept] = step(kept);
    const auto [loss_again, next_again] = step(again);
    CHECK(loss_again == loss_kept);
    CHECK(torch::equal(next_again, next_kept));  // the generator left as the forward left it
    const auto pk = kept->named_parameters(true), pa = again->named_parameters(true);
    for (const auto& kv : pk) {
      CAPTURE(kv.key());
      const auto& ga = pa[kv.key()].grad();
      REQUIRE(ga.defined());
      CHECK(torch::allclose(ga, kv.value().grad(), 1e-5, 1e-7));
    }
  }
}
