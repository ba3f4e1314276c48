// Checkpoint format, atomic save, verification on read and exact resume.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include "support/config_error.h"
#include "support/temp_dir.h"

#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "accel/models/vit.h"
#include "accel/train/checkpoint.h"
#include "accel/util/errors.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using accel::models::VisionTransformer;
using accel::models::ViTSpec;
using namespace accel::train;

using accel_test::TempDir;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

using accel_test::config_error;
using accel_test::has;

ViTSpec tiny_spec(int classes = 3, int depth = 2) {
  ViTSpec s;
  s.image_size = 16;
  s.patch_size = 4;
  s.in_channels = 1;
  s.dim = 16;
  s.depth = depth;
  s.heads = 2;
  s.mlp_dim = 32;
  s.num_classes = classes;
  s.dropout = 0.1;
  s.attention_dropout = 0.1;
  return s;
}

VisionTransformer make_model(uint64_t init_seed, const ViTSpec& spec = tiny_spec()) {
  torch::manual_seed(init_seed);
  return VisionTransformer(spec);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind,
                                                        VisionTransformer& m, double lr) {
  auto params = m->parameters();
  if (kind == "adam") return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(lr));
  if (kind == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(lr).weight_decay(0.05));
  }
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(0.9));
}

struct Batch {
  torch::Tensor x, y;
};
std::vector<Batch> make_data(int n) {
  torch::manual_seed(7);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back({torch::randn({4, 1, 16, 16}), torch::randint(0, 3, {4})});
  return out;
}

double train_step(VisionTransformer& m, torch::optim::Optimizer& opt, const Batch& b) {
  opt.zero_grad();
  auto loss = torch::nn::functional::cross_entropy(m->forward(b.x), b.y);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

bool same_parameters(VisionTransformer& a, VisionTransformer& b) {
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  if (pa.size() != pb.size()) return false;
  for (const auto& item : pa) {
    const auto* other = pb.find(item.key());
    if (!other || !torch::equal(item.value(), *other)) return false;
  }
  return true;
}

// A small trained model, saved to FILE.
void save_trained(const fs::path& file, bool overwrite = false, const json& config = {{"k", 1}}) {
  auto model = make_model(1);
  auto opt = make_optimizer("adam", model, 1e-3);
  auto data = make_data(1);
  train_step(model, *opt, data[0]);
  save_checkpoint(file, *model, *opt, json::object(), TrainProgress{0, 1, 1, {}}, config,
                  overwrite);
}

}  // namespace

TEST_CASE("checkpoint: round trip restores parameters and optimizer state exactly") {
  TempDir dir;
  const auto data = make_data(3);
  for (const std::string kind : {"adam", "adamw", "sgd"}) {
    INFO(kind);
    auto a = make_model(1);
    auto opt_a = make_optimizer(kind, a, 1e-2);
    torch::manual_seed(11);
    train_step(a, *opt_a, data[0]);
    train_step(a, *opt_a, data[1]);
    const fs::path file = dir.path / (kind + ".ckpt");
    save_checkpoint(file, *a, *opt_a, json::object(), TrainProgress{}, json::object(), false);

    auto b = make_model(2);
    auto opt_b = make_optimizer(kind, b, 0.5);  // options come from the checkpoint
    CHECK_FALSE(same_parameters(a, b));
    const auto ckpt = read_checkpoint(file);
    CHECK(ckpt.meta["optimizer"] == kind);
    CHECK(ckpt.meta["format_version"] == kCheckpointFormatVersion);
    restore_for_resume(ckpt, *b, *opt_b);
    CHECK(same_parameters(a, b));
    CHECK(opt_b->param_groups()[0].options().get_lr() == opt_a->param_groups()[0].options().get_lr());

    // A model with the same weights but a fresh optimizer steps differently.
    auto c = make_model(3);
    auto opt_c = make_optimizer(kind, c, 1e-2);
    {
      torch::NoGradGuard guard;
      const auto tensors = ckpt.model_tensors();
      for (auto& item : c->named_parameters()) item.value().copy_(tensors.at(item.key()));
    }
    torch::manual_seed(5);
    const double la = train_step(a, *opt_a, data[2]);
    torch::manual_seed(5);
    const double lb = train_step(b, *opt_b, data[2]);
    torch::manual_seed(5);
    train_step(c, *opt_c, data[2]);
    CHECK(la == lb);
    CHECK(same_parameters(a, b));
    CHECK_FALSE(same_parameters(a, c));
  }
}

TEST_CASE("checkpoint: a run stopped after k steps and resumed matches an uninterrupted run") {
  TempDir dir;
  const auto data = make_data(6);
  const std::string kind = "adamw";

  auto full = make_model(1);
  auto opt_full = make_optimizer(kind, full, 1e-2);
  torch::manual_seed(42);
  std::vector<double> full_losses;
  for (const auto& b : data) full_losses.push_back(train_step(full, *opt_full, b));

  auto first = make_model(1);
  auto opt_first = make_optimizer(kind, first, 1e-2);
  torch::manual_seed(42);
  std::vector<double> losses;
  for (int i = 0; i < 3; ++i) losses.push_back(train_step(first, *opt_first, data[i]));
  const fs::path file = dir.path / "step3.ckpt";
  save_checkpoint(file, *first, *opt_first, json{{"scale", 65536.0}}, TrainProgress{0, 3, 3, {}},
                  json::object(), false);

  torch::manual_seed(999);  // a new process: other weights, other RNG state
  auto resumed = make_model(2);
  auto opt_resumed = make_optimizer(kind, resumed, 1e-2);
  const auto ckpt = read_checkpoint(file);
  CHECK(ckpt.progress.step == 3);
  restore_for_resume(ckpt, *resumed, *opt_resumed);
  for (int i = 3; i < 6; ++i) losses.push_back(train_step(resumed, *opt_resumed, data[i]));

  REQUIRE(losses.size() == full_losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    INFO("step " << i);
    CHECK(losses[i] == full_losses[i]);
  }
  CHECK(same_parameters(full, resumed));

  // Without the RNG state, dropout draws other masks: the test sees the difference.
  torch::manual_seed(999);
  auto no_rng = make_model(2);
  auto opt_no_rng = make_optimizer(kind, no_rng, 1e-2);
  {
    torch::NoGradGuard guard;
    for (auto& item : no_rng->named_parameters()) item.value().copy_(ckpt.model_tensors().at(item.key()));
  }
  ckpt.restore_optimizer(*opt_no_rng);
  for (int i = 3; i < 6; ++i) train_step(no_rng, *opt_no_rng, data[i]);
  CHECK_FALSE(same_parameters(full, no_rng));
}

TEST_CASE("checkpoint: truncated files are errors that say truncated") {
  TempDir dir;
  const fs::path good = dir.path / "good.ckpt";
  save_trained(good);
  const std::string bytes = read_bytes(good);
  REQUIRE(bytes.size() > 1000);
  const fs::path cut = dir.path / "cut.ckpt";
  for (size_t keep : {size_t{0}, size_t{5}, size_t{12}, size_t{20}, size_t{24}, bytes.size() / 2,
                      bytes.size() - 4, bytes.size() - 1}) {
    INFO("kept " << keep << " of " << bytes.size() << " bytes");
    write_bytes(cut, bytes.substr(0, keep));
    const auto msg = config_error([&] { read_checkpoint(cut); });
    CHECK(has(msg, "truncated checkpoint"));
    CHECK(has(msg, cut.string()));
    CHECK(has(msg, "found " + std::to_string(keep)));
  }
  write_bytes(cut, bytes.substr(0, bytes.size() / 2));
  CHECK(has(config_error([&] { read_checkpoint(cut); }),
            "expected " + std::to_string(bytes.size()) + " bytes"));
  write_bytes(cut, bytes + "x");
  CHECK(has(config_error([&] { read_checkpoint(cut); }), "corrupt checkpoint"));
}

TEST_CASE("checkpoint: damaged and foreign files are config errors naming the file") {
  TempDir dir;
  const fs::path good = dir.path / "good.ckpt";
  save_trained(good);
  const std::string bytes = read_bytes(good);
  const fs::path bad = dir.path / "bad.ckpt";
  for (size_t at : {size_t{24}, bytes.size() / 2, bytes.size() - 5, bytes.size() - 2}) {
    INFO("flipped byte " << at);
    std::string damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x20);
    write_bytes(bad, damaged);
    const auto msg = config_error([&] { read_checkpoint(bad); });
    CHECK(has(msg, "corrupt checkpoint (CRC mismatch)"));
    CHECK(has(msg, bad.string()));
  }
  // a newer format version
  std::string newer = bytes;
  newer[8] = 9;
  write_bytes(bad, newer);
  CHECK(has(config_error([&] { read_checkpoint(bad); }), "format version 9"));
  // garbage, an empty file, a torch archive of something else
  std::mt19937 rng(3);
  std::string garbage(4096, '\0');
  for (auto& c : garbage) c = static_cast<char>(rng());
  write_bytes(bad, garbage);
  CHECK(has(config_error([&] { read_checkpoint(bad); }), "not an accel-bench checkpoint"));
  write_bytes(bad, "");
  CHECK(has(config_error([&] { read_checkpoint(bad); }), "truncated"));
  // a valid envelope around a payload that is not an archive
  std::string payload(300, 'z');
  std::string env = bytes.substr(0, 16);
  for (int i = 0; i < 8; ++i) env.push_back(static_cast<char>((payload.size() >> (8 * i)) & 0xff));
  env += payload;
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
  for (int i = 0; i < 4; ++i) env.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  write_bytes(bad, env);
  const auto msg = config_error([&] { read_checkpoint(bad); });
  CHECK(has(msg, "cannot parse checkpoint payload"));
  CHECK(has(msg, bad.string()));
  // missing file and a folder
  const fs::path missing = dir.path / "nope.ckpt";
  const auto missing_msg = config_error([&] { read_checkpoint(missing); });
  CHECK(has(missing_msg, missing.string()));
  CHECK(has(missing_msg, "not found"));
  CHECK(has(config_error([&] { read_checkpoint(dir.path); }), "not a regular file"));
}

TEST_CASE("checkpoint: an existing file is kept unless overwrite is asked") {
  TempDir dir;
  const fs::path file = dir.path / "run.ckpt";
  save_trained(file, false, {{"version", "first"}});
  const std::string before = read_bytes(file);
  const auto msg = config_error([&] { save_trained(file, false, {{"version", "second"}}); });
  CHECK(has(msg, file.string() + ": checkpoint exists; pass --force/overwrite"));
  CHECK(read_bytes(file) == before);
  save_trained(file, true, {{"version", "second"}});
  CHECK(read_checkpoint(file).config["version"] == "second");
}

TEST_CASE("checkpoint: saving leaves no temp files and creates the folder") {
  TempDir dir;
  const fs::path file = dir.path / "sub" / "run.ckpt";
  save_trained(file);
  save_trained(file, true);
  CHECK(config_error([&] { save_trained(file); }) != "<no exception>");
  TempDir listing;
  listing.path = dir.path / "sub";
  CHECK(listing.entries() == std::vector<std::string>{"run.ckpt"});
  listing.path.clear();  // owned by dir
}

TEST_CASE("checkpoint: progress config and grad scaler JSON round trip") {
  TempDir dir;
  const fs::path file = dir.path / "run.ckpt";
  auto model = make_model(1);
  auto opt = make_optimizer("sgd", model, 0.1);
  TrainProgress progress;
  progress.epoch = 2;
  progress.step = 12345678901LL;
  progress.batch_in_epoch = 17;
  progress.extra = {{"correct", 40}, {"seen", 64}, {"step_times", {0.1, 1.0 / 3.0, 2.5e-7}},
                    {"epochs", json::array({{{"val_acc", 0.8125}}})}};
  const json scaler = {{"scale", 32768.0}, {"growth_tracker", 7}, {"enabled", true}};
  const json config = {{"name", "tiny \xc3\xa9"}, {"optim", {{"lr", 5e-5}}}, {"train", {{"epochs", 3}}}};
  save_checkpoint(file, *model, *opt, scaler, progress, config, false);
  const auto ckpt = read_checkpoint(file);
  CHECK(ckpt.progress.epoch == 2);
  CHECK(ckpt.progress.step == 12345678901LL);
  CHECK(ckpt.progress.batch_in_epoch == 17);
  CHECK(ckpt.progress.extra == progress.extra);
  CHECK(ckpt.grad_scaler == scaler);
  CHECK(ckpt.config == config);
  CHECK(ckpt.meta["torch_version"].get<std::string>().size() > 0);
  CHECK(ckpt.meta["accel_version"].get<std::string>().size() > 0);
  CHECK(ckpt.model_tensors().size() == model->named_parameters().size());
  CHECK(ckpt.model_tensors().count("heads.head.weight") == 1);
  CHECK(ckpt.model_tensors().count("encoder.layers.encoder_layer_1.mlp.3.bias") == 1);
  CHECK(progress_from_json(progress_to_json(progress), "x").step == progress.step);
  CHECK(has(config_error([] { progress_from_json(json{{"epoch", 1}}, "src"); }),
            "src: checkpoint progress.step"));
}

TEST_CASE("checkpoint: resuming into another model or optimizer is an error naming the tensor") {
  TempDir dir;
  const fs::path file = dir.path / "run.ckpt";
  save_trained(file);
  const auto ckpt = read_checkpoint(file);

  auto other_head = make_model(2, tiny_spec(5));
  auto opt = make_optimizer("adam", other_head, 1e-3);
  const auto before = other_head->head->weight.clone();
  auto msg = config_error([&] { restore_for_resume(ckpt, *other_head, *opt); });
  CHECK(has(msg, "heads.head.weight"));
  CHECK(has(msg, file.string()));
  CHECK(torch::equal(other_head->head->weight, before));  // untouched
  auto deeper = make_model(2, tiny_spec(3, 3));
  opt = make_optimizer("adam", deeper, 1e-3);
  msg = config_error([&] { restore_for_resume(ckpt, *deeper, *opt); });
  CHECK(has(msg, "encoder.layers.encoder_layer_2."));
  CHECK(has(msg, "not in the checkpoint"));
  auto shallower = make_model(2, tiny_spec(3, 1));
  opt = make_optimizer("adam", shallower, 1e-3);
  msg = config_error([&] { restore_for_resume(ckpt, *shallower, *opt); });
  CHECK(has(msg, "encoder.layers.encoder_layer_1."));
  CHECK(has(msg, "not in the model"));

  auto same = make_model(2);
  auto sgd = make_optimizer("sgd", same, 1e-3);
  const auto param = same->class_token.clone();
  msg = config_error([&] { restore_for_resume(ckpt, *same, *sgd); });
  CHECK(has(msg, "adam optimizer state"));
  CHECK(has(msg, "sgd"));
  CHECK(torch::equal(same->class_token, param));
  torch::optim::Adam partial(std::vector<torch::Tensor>{same->class_token}, torch::optim::AdamOptions(1e-3));
  msg = config_error([&] { ckpt.restore_optimizer(partial); });
  CHECK(has(msg, "optimizer parameters differ"));
  CHECK(has(msg, "group 0 has " + std::to_string(same->parameters().size()) +
                     " parameters in the checkpoint"));
}
