// Config loading, extends, --set, validation messages and --explain.
#include <doctest/doctest.h>

#include "support/config_error.h"
#include "support/temp_dir.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include "accel/config/run_config.h"
#include "accel/util/errors.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace accel::config;

// A fresh directory under the system temp dir, removed afterwards.
using accel_test::TempDir;

using accel_test::config_error;
using accel_test::has;

// Message contains every part and is one line.
void check_message(const std::string& msg, std::initializer_list<std::string> parts) {
  CHECK_MESSAGE(msg.find('\n') == std::string::npos, msg);
  for (const auto& p : parts) CHECK_MESSAGE(has(msg, p), "missing \"" << p << "\" in: " << msg);
}

json resolve(const json& doc, const std::vector<std::string>& sets = {}) {
  return resolve_config(doc, fs::current_path(), sets);
}

std::string resolve_error(const json& doc, const std::vector<std::string>& sets = {}) {
  return config_error([&] { resolve(doc, sets); });
}

// Every field path, written out independently of the schema table so a
// field dropped from the table fails a test.
const std::vector<std::string> kAllPaths = {
    "name", "description", "model.arch", "model.preset", "model.image_size", "model.in_channels",
    "model.patch_size", "model.dim", "model.depth", "model.heads", "model.mlp_dim",
    "model.num_classes", "model.dropout", "model.attention_dropout", "model.init",
    "model.init_path", "model.init_strict", "model.init_head", "model.init_format",
    "data.dataset", "data.root", "data.classes", "data.train_subset", "data.val_fraction",
    "data.resize", "data.normalize", "data.synthetic_train", "data.synthetic_test",
    "data.prefetch", "optim.name", "optim.lr", "optim.weight_decay", "optim.momentum",
    "optim.beta1", "optim.beta2", "optim.eps", "optim.implementation", "optim.scheduler", "optim.warmup_steps",
    "optim.min_lr", "train.epochs", "train.batch_size",
    "train.eval_batch_size", "train.seed", "train.log_every", "train.limit_train_batches",
    "train.limit_eval_batches", "train.warmup_steps", "train.loop", "train.grad_clip",
    "train.max_steps", "train.checkpoint_every", "train.save_checkpoint", "train.task", "train.test_weights",
    "train.val_every_steps", "train.accumulate", "train.inject_delay", "train.target",
    "train.target_metric", "train.stop_at_target",
    "runtime.accelerator", "runtime.devices",
    "runtime.num_nodes", "runtime.strategy", "runtime.precision", "runtime.threads",
    "runtime.backend", "runtime.timeout_s", "runtime.master_addr", "runtime.master_port",
    "runtime.bucket_mb", "runtime.comm_wait", "runtime.fsdp_sharding", "runtime.fsdp_prefetch",
    "runtime.matmul_precision", "runtime.attention", "runtime.cuda_graphs"};

const json& at_path(const json& doc, const std::string& path) {
  auto dot = path.find('.');
  if (dot == std::string::npos) return doc.at(path);
  return doc.at(path.substr(0, dot)).at(path.substr(dot + 1));
}

}  // namespace

TEST_CASE("config: an empty document resolves to every field with its default") {
  json r = resolve(json::object());
  size_t leaves = 0;
  for (const auto& [k, v] : r.items()) leaves += v.is_object() ? v.size() : 1;
  CHECK(leaves == kAllPaths.size());
  for (const auto& p : kAllPaths) CHECK_NOTHROW(at_path(r, p));
  CHECK_FALSE(r.contains("extends"));
  CHECK(r["model"]["preset"] == "vit_tiny_fmnist");
  CHECK(r["model"]["init"] == "random");
  CHECK(r["model"]["num_classes"] == 0);
  CHECK(r["data"]["classes"] == json::array());
  CHECK(r["runtime"]["precision"] == "32-true");
  CHECK(r["name"] == "");

  TempDir dir;
  CHECK(load_config(dir.write("empty.json", "{}")) == r);
  // `{}` in C++ is a JSON null; it means an empty document too.
  CHECK(resolve_config({}, dir.path) == r);
  CHECK(resolve_config({}, dir.path, {"train.epochs=2"})["train"]["epochs"] == 2);
}

TEST_CASE("config: schema defaults match the RunConfig struct defaults") {
  RunConfig c = to_run_config(resolve(json::object()));
  RunConfig d;
  CHECK(c.model.preset == "vit_tiny_fmnist");  // the struct leaves preset empty
#define SAME(field) CHECK(c.field == d.field)
  SAME(model.image_size); SAME(model.in_channels); SAME(model.patch_size); SAME(model.dim);
  SAME(model.depth); SAME(model.heads); SAME(model.mlp_dim); SAME(model.num_classes);
  SAME(model.dropout); SAME(model.attention_dropout); SAME(model.init);
  SAME(data.dataset); SAME(data.root); SAME(data.classes); SAME(data.train_subset);
  SAME(data.val_fraction); SAME(data.resize); SAME(data.normalize); SAME(data.synthetic_train);
  SAME(data.synthetic_test); SAME(data.prefetch);
  SAME(optim.name); SAME(optim.lr); SAME(optim.weight_decay); SAME(optim.momentum);
  SAME(optim.beta1); SAME(optim.beta2); SAME(optim.eps);
  SAME(train.epochs); SAME(train.batch_size); SAME(train.eval_batch_size); SAME(train.seed);
  SAME(train.log_every); SAME(train.limit_train_batches); SAME(train.limit_eval_batches);
  SAME(train.warmup_steps); SAME(train.target); SAME(train.target_metric); SAME(train.stop_at_target);
  SAME(runtime.accelerator); SAME(runtime.devices); SAME(runtime.num_nodes);
  SAME(runtime.strategy); SAME(runtime.precision); SAME(runtime.threads);
  SAME(runtime.matmul_precision); SAME(runtime.attention); SAME(runtime.cuda_graphs);
#undef SAME
}

TEST_CASE("config: to_run_config converts every section") {
  json r = resolve({{"name", "run1"},
                    {"model", {{"preset", "vit_b_16"}, {"num_classes", 3}, {"dropout", 0.1}}},
                    {"data", {{"dataset", "cifar10"}, {"classes", {3, 5, 7}}, {"normalize", false},
                              {"train_subset", 5000000000LL}}},
                    {"optim", {{"name", "sgd"}, {"lr", 0.1}}},
                    {"train", {{"epochs", 2}, {"seed", 18446744073709551615ULL},
                               {"loop", "fabric"}, {"max_steps", 7}}},
                    {"runtime", {{"accelerator", "cuda"}, {"devices", 2}, {"strategy", "ddp"},
                                 {"precision", "bf16"}}}});
  RunConfig c = to_run_config(r);
  CHECK(c.name == "run1");
  CHECK(c.model.preset == "vit_b_16");
  CHECK(c.model.num_classes == 3);
  CHECK(c.model.dropout == doctest::Approx(0.1));
  CHECK(c.data.dataset == "cifar10");
  CHECK(c.data.classes == std::vector<int>{3, 5, 7});
  CHECK_FALSE(c.data.normalize);
  CHECK(c.data.train_subset == 5000000000LL);
  CHECK(c.optim.name == "sgd");
  CHECK(c.optim.lr == doctest::Approx(0.1));
  CHECK(c.train.epochs == 2);
  CHECK(c.train.seed == 18446744073709551615ULL);
  CHECK(c.train.loop == "fabric");
  CHECK(c.train.max_steps == 7);
  CHECK(c.runtime.accelerator == "cuda");
  CHECK(c.runtime.devices == 2);
  CHECK(c.runtime.strategy == "ddp");
  CHECK(c.runtime.precision == "bf16-mixed");
  // A partial document gets defaults rather than a json exception.
  CHECK(to_run_config(json{{"train", {{"epochs", 4}}}}).train.epochs == 4);
  check_message(config_error([] { to_run_config(json{{"extends", "x.json"}}); }), {"extends"});
}

TEST_CASE("config: extends chain merges per key and the child wins") {
  TempDir dir;
  dir.write("base/base.json", R"({"name": "base",
    "train": {"epochs": 3, "batch_size": 8, "seed": 7},
    "data": {"classes": [0, 1, 2], "root": "/data"},
    "optim": {"lr": 0.01}})");
  dir.write("mid/mid.json", R"({"extends": "../base/base.json",
    "train": {"batch_size": 32},
    "data": {"classes": [1, 2, 3, 4]}})");
  fs::path leaf = dir.write("runs/leaf/leaf.json", R"({"extends": "../../mid/mid.json",
    "name": "leaf", "data": {"classes": [4]}, "optim": {"lr": null}})");

  json r = load_config(leaf);
  CHECK(r["name"] == "leaf");                   // leaf wins
  CHECK(r["train"]["batch_size"] == 32);        // mid wins over base
  CHECK(r["train"]["epochs"] == 3);             // from base, untouched by children
  CHECK(r["train"]["seed"] == 7);
  CHECK(r["data"]["root"] == "/data");          // sibling keys of an overridden one kept
  CHECK(r["data"]["classes"] == json{4});       // lists are replaced whole
  CHECK(r["optim"]["lr"] == doctest::Approx(5e-5));  // null restores the default
  CHECK(r["train"]["log_every"] == 300);        // defaults fill the rest
  CHECK_FALSE(r.contains("extends"));
}

TEST_CASE("config: resolve_config follows extends relative to base_dir") {
  TempDir dir;
  dir.write("sub/base.json", R"({"train": {"epochs": 2}, "runtime": {"threads": 3}})");
  json r = resolve_config({{"extends", "sub/base.json"}, {"runtime", {{"threads", 1}}}}, dir.path);
  CHECK(r["train"]["epochs"] == 2);
  CHECK(r["runtime"]["threads"] == 1);
}

TEST_CASE("config: --set overrides numbers strings and lists and normalises aliases") {
  TempDir dir;
  dir.write("base.json", R"({"train": {"epochs": 3}, "data": {"classes": [1, 2]}})");
  fs::path file = dir.write("child.json", R"({"extends": "base.json", "optim": {"lr": 0.5}})");
  json r = load_config(file, {"optim.lr=1e-4", "runtime.precision=bf16", "data.classes=[5,6]",
                              "train.epochs=7", "train.epochs=9", "data.root=/tmp/x y",
                              "name=123", "data.normalize=false", "model.preset=\"vit_b_32\""});
  CHECK(r["optim"]["lr"] == doctest::Approx(1e-4));
  CHECK(r["runtime"]["precision"] == "bf16-mixed");
  CHECK(r["data"]["classes"] == json{5, 6});
  CHECK(r["train"]["epochs"] == 9);  // applied in order
  CHECK(r["data"]["root"] == "/tmp/x y");
  CHECK(r["name"] == "123");         // string fields take the text as is
  CHECK(r["data"]["normalize"] == false);
  CHECK(r["model"]["preset"] == "vit_b_32");

  CHECK(resolve(json::object(), {"runtime.precision=16"})["runtime"]["precision"] == "16-mixed");
  CHECK(resolve(json::object(), {"runtime.precision=bf16-mixed"})["runtime"]["precision"] ==
        "bf16-mixed");
  CHECK(resolve({{"train", {{"epochs", 4}}}}, {"train.epochs=null"})["train"]["epochs"] == 10);
}

TEST_CASE("config: precision aliases in files normalise to Lightning names") {
  CHECK(resolve({{"runtime", {{"precision", "16"}}}})["runtime"]["precision"] == "16-mixed");
  CHECK(resolve({{"runtime", {{"precision", "bf16"}}}})["runtime"]["precision"] == "bf16-mixed");
  CHECK(resolve({{"runtime", {{"precision", "32"}}}})["runtime"]["precision"] == "32-true");
  CHECK(resolve({{"runtime", {{"precision", 64}}}})["runtime"]["precision"] == "64-true");
  CHECK(resolve({{"runtime", {{"precision", "16-true"}}}})["runtime"]["precision"] == "16-true");
}

TEST_CASE("config: integral floats count as ints and ints as floats") {
  json r = resolve({{"train", {{"epochs", 5.0}}}, {"optim", {{"lr", 1}}}});
  CHECK(r["train"]["epochs"].is_number_integer());
  CHECK(r["train"]["epochs"] == 5);
  CHECK(r["optim"]["lr"].is_number_float());
  CHECK(r["optim"]["lr"] == 1.0);
  check_message(resolve_error({{"train", {{"epochs", 5.5}}}}),
                {"train.epochs: expected an integer >= 1, got 5.5"});
  check_message(resolve_error({{"train", {{"seed", -1}}}}), {"train.seed", "got -1"});
  check_message(resolve_error({{"train", {{"batch_size", 3000000000LL}}}}),
                {"train.batch_size", "does not fit in a 32-bit integer"});
  check_message(resolve_error({{"data", {{"normalize", 1}}}}),
                {"data.normalize: expected true or false, got 1"});
  check_message(resolve_error({{"data", {{"normalize", "true"}}}}), {"data.normalize"});
}

TEST_CASE("config: unknown key names the file and the path and lists the valid keys") {
  TempDir dir;
  fs::path file = dir.write("x.json", R"({"train": {"epoch": 3}})");
  std::string msg = config_error([&] { load_config(file); });
  check_message(msg, {file.string() + ": unknown key \"train.epoch\"",
                      "valid keys in \"train\": accumulate, activation_checkpointing, batch_size, checkpoint_every, epochs, eval_batch_size",
                      "did you mean \"train.epochs\"?"});
  // The same key in another section is suggested.
  check_message(resolve_error({{"train", {{"lr", 0.1}}}}),
                {"unknown key \"train.lr\"", "did you mean \"optim.lr\"?"});
}

TEST_CASE("config: unknown section and unknown top-level key are rejected") {
  TempDir dir;
  fs::path file = dir.write("x.json", R"({"trian": {"epochs": 3}})");
  check_message(config_error([&] { load_config(file); }),
                {file.string(), "unknown section \"trian\"", "valid top-level keys: extends",
                 "did you mean \"train\"?"});
  check_message(resolve_error({{"nmae", "x"}}),
                {"unknown top-level key \"nmae\"", "did you mean \"name\"?"});
  check_message(resolve_error({{"epochs", 3}}), {"\"epochs\"", "did you mean \"train.epochs\"?"});
  // A key spelt with a newline or a control character stays on the message's one line, escaped.
  const auto odd = resolve_error({{"na\nme", "x"}});
  check_message(odd, {"unknown top-level key \"na\\nme\""});
  CHECK(odd.find('\n') == std::string::npos);
  const auto inner = resolve_error({{"train", {{"ep\x01ochs", 3}}}});
  check_message(inner, {"unknown key \"train.ep\\u0001ochs\""});
  check_message(resolve_error({{"train", 3}}), {"train: expected an object"});
  check_message(resolve_error(json::array()), {"expected a JSON object at the top level"});
}

TEST_CASE("config: wrong type is reported with the path and the value") {
  TempDir dir;
  fs::path file = dir.write("x.json", R"({"train": {"batch_size": "big"}})");
  check_message(config_error([&] { load_config(file); }),
                {file.string() + ": train.batch_size: expected an integer >= 1, got \"big\""});
  check_message(resolve_error({{"optim", {{"lr", "fast"}}}}),
                {"optim.lr: expected a number > 0, got \"fast\""});
  check_message(resolve_error({{"optim", {{"name", 3}}}}), {"optim.name: expected a string"});
  check_message(resolve_error({{"data", {{"classes", 3}}}}),
                {"data.classes: expected a list of integers"});
  check_message(resolve_error({{"data", {{"classes", {1, "two"}}}}}), {"data.classes[1]"});
  check_message(resolve_error({{"extends", 5}}), {"extends: expected a path"});
}

TEST_CASE("config: out-of-range values are reported with the bound") {
  check_message(resolve_error({{"train", {{"batch_size", 0}}}}),
                {"train.batch_size: expected an integer >= 1, got 0"});
  check_message(resolve_error({{"train", {{"epochs", 0}}}}), {"train.epochs", ">= 1"});
  check_message(resolve_error({{"optim", {{"lr", 0}}}}), {"optim.lr: expected a number > 0"});
  check_message(resolve_error({{"data", {{"val_fraction", 1.0}}}}),
                {"data.val_fraction: expected a number in [0, 1), got 1.0"});
  check_message(resolve_error({{"model", {{"dropout", -0.1}}}}), {"model.dropout", "[0, 1)"});
  check_message(resolve_error({{"runtime", {{"devices", 0}}}}), {"runtime.devices", "in [1, 1024]"});
  check_message(resolve_error({{"runtime", {{"num_nodes", 0}}}}), {"runtime.num_nodes"});
  check_message(resolve_error({{"runtime", {{"threads", -1}}}}), {"runtime.threads", "[0, 4096]"});
  check_message(resolve_error({{"train", {{"log_every", 0}}}}), {"train.log_every"});
  check_message(resolve_error({{"train", {{"limit_train_batches", -2}}}}),
                {"train.limit_train_batches"});
  check_message(resolve_error({{"data", {{"prefetch", -1}}}}), {"data.prefetch"});
  check_message(resolve_error({{"data", {{"train_subset", -1}}}}), {"data.train_subset"});
  check_message(resolve_error({{"data", {{"resize", -1}}}}), {"data.resize"});
  check_message(resolve_error({{"data", {{"classes", {1, -1}}}}}),
                {"data.classes[1]: expected an integer >= 0, got -1"});
  check_message(resolve_error({{"data", {{"classes", {1, 2, 1}}}}}),
                {"data.classes: 1 appears more than once"});
}

TEST_CASE("config: bad choice lists the allowed values") {
  check_message(resolve_error({{"runtime", {{"precision", "fp8"}}}}),
                {"runtime.precision: \"fp8\" is not one of 32-true, 16-mixed, bf16-mixed",
                 "aliases: 16, bf16, 32, 64"});
  check_message(resolve_error({{"data", {{"dataset", "fahsion-mnist"}}}}),
                {"data.dataset", "fashion-mnist, cifar10, synthetic",
                 "did you mean \"fashion-mnist\"?"});
  check_message(resolve_error({{"optim", {{"name", "rmsprop"}}}}), {"adam, adamw, sgd"});
  check_message(resolve_error({{"runtime", {{"accelerator", "tpu"}}}}), {"cpu, cuda, auto"});
  check_message(resolve_error({{"runtime", {{"strategy", "deepspeed"}}}}),
                {"auto, single, ddp, fsdp"});
  check_message(resolve_error({{"model", {{"preset", "vit_h_14"}}}}),
                {"vit_tiny_fmnist, vit_b_16, vit_b_32, vit_l_16, custom"});
}

TEST_CASE("config: cross-field checks name the fields involved") {
  check_message(resolve_error({{"model", {{"preset", "custom"}}}}),
                {"model.patch_size: must be set", "custom"});
  check_message(resolve_error({{"model", {{"dim", 100}, {"heads", 3}}}}),
                {"model.heads: 3 does not divide model.dim 100"});
  check_message(resolve_error({{"model", {{"image_size", 30}, {"patch_size", 4}}}}),
                {"model.patch_size", "model.image_size 30"});
  check_message(resolve_error({{"data", {{"classes", {3, 10}}}}}),
                {"data.classes: 10 is not a class of fashion-mnist"});
  CHECK_NOTHROW(resolve({{"data", {{"dataset", "synthetic"}, {"classes", {3, 10}}}}}));
  check_message(resolve_error({{"model", {{"num_classes", 2}}}, {"data", {{"classes", {1, 2, 3}}}}}),
                {"model.num_classes: 2 is fewer than the 3 classes"});
  check_message(resolve_error({{"runtime", {{"strategy", "single"}, {"devices", 2}}}}),
                {"runtime.strategy: \"single\" needs runtime.devices = 1"});
  CHECK_NOTHROW(resolve({{"runtime", {{"accelerator", "cuda"}, {"devices", 8}}}}));
}

TEST_CASE("config: errors name the file or --set that set the bad value") {
  TempDir dir;
  fs::path base = dir.write("conf/base.json", R"({"train": {"batch_size": 0}})");
  fs::path child = dir.write("conf/child.json", R"({"extends": "base.json"})");
  check_message(config_error([&] { load_config(child); }),
                {base.string() + ": train.batch_size: expected an integer >= 1, got 0"});
  // A key unknown in the parent is reported against the parent.
  dir.write("conf/typo.json", R"({"optim": {"lrr": 1}})");
  fs::path c2 = dir.write("conf/c2.json", R"({"extends": "typo.json"})");
  check_message(config_error([&] { load_config(c2); }),
                {(dir.path / "conf/typo.json").string() + ": unknown key \"optim.lrr\""});
  check_message(config_error([&] { load_config(child, {"train.batch_size=-3"}); }),
                {"--set \"train.batch_size=-3\": train.batch_size", "got -3"});
  CHECK(load_config(child, {"train.batch_size=4"})["train"]["batch_size"] == 4);
}

TEST_CASE("config: the init shorthand object spells out the flat init fields") {
  TempDir dir;
  fs::path file = dir.write(
      "ft.json", R"({"model": {"init": {"checkpoint": "runs/p/checkpoint.ckpt", "strict": false}}})");
  json r = load_config(file);
  CHECK(r["model"]["init"] == "checkpoint");
  CHECK(r["model"]["init_path"] == "runs/p/checkpoint.ckpt");
  CHECK(r["model"]["init_strict"] == false);
  fs::path st = dir.write("st.json", R"({"model": {"init": {"safetensors": "w.st", "format": "timm"}}})");
  CHECK(load_config(st)["model"]["init_format"] == "timm");
  fs::path gg = dir.write("gg.json", R"({"model": {"arch": "gpt", "init": {"gguf": "smol.gguf"}}})");
  CHECK(load_config(gg)["model"]["init"] == "gguf");
  CHECK(load_config(gg)["model"]["init_path"] == "smol.gguf");
  fs::path bad = dir.write("bad.json", R"({"model": {"init": {"checkpoint": "a", "safetensors": "b"}}})");
  check_message(config_error([&] { load_config(bad); }), {"bad.json", "model.init"});
  fs::path odd = dir.write("odd.json", R"({"model": {"init": {"checkpoint": "a", "stritc": true}}})");
  check_message(config_error([&] { load_config(odd); }), {"odd.json", "unknown key \"stritc\""});
  check_message(resolve_error({{"model", {{"init", "checkpoint"}}}}), {"model.init_path"});
}

TEST_CASE("config: malformed JSON reports the file with line and column") {
  TempDir dir;
  fs::path file = dir.write("bad.json", "{\n  \"train\": {\n    \"epochs\": 5,\n  }\n}\n");
  check_message(config_error([&] { load_config(file); }),
                {file.string() + ": malformed JSON at line 4, column 3: ", "unexpected '}'"});
  fs::path lit = dir.write("lit.json", "{\"data\": {\"normalize\": tru}}");
  check_message(config_error([&] { load_config(lit); }),
                {lit.string() + ": malformed JSON at line 1, column 27", "invalid literal"});
  fs::path empty = dir.write("empty.json", "");
  check_message(config_error([&] { load_config(empty); }),
                {"empty.json: malformed JSON at line 1, column 1", "the file is empty"});
  // In a parent, the parent is named.
  dir.write("sub/p.json", "{,}");
  fs::path child = dir.write("child.json", R"({"extends": "sub/p.json"})");
  check_message(config_error([&] { load_config(child); }),
                {(dir.path / "sub/p.json").string() + ": malformed JSON at line 1, column 2"});
}

TEST_CASE("config: missing file and missing extends target name the file") {
  TempDir dir;
  fs::path missing = dir.path / "nope.json";
  CHECK_THROWS_AS(load_config(missing), accel::ConfigError);
  check_message(config_error([&] { load_config(missing); }),
                {missing.string() + ": cannot read config file", "No such file"});
  check_message(config_error([&] { load_config(dir.path); }), {"is a directory"});

  fs::path child = dir.write("a/child.json", R"({"extends": "../base/missing.json"})");
  check_message(config_error([&] { load_config(child); }),
                {child.string() + ": extends \"../base/missing.json\": cannot read " +
                     (dir.path / "base/missing.json").string()});
  check_message(resolve_error({{"extends", "gone.json"}}), {"extends \"gone.json\"", "gone.json"});
}

TEST_CASE("config: extends cycle is reported with the chain") {
  TempDir dir;
  fs::path a = dir.write("a.json", R"({"extends": "sub/b.json"})");
  dir.write("sub/b.json", R"({"extends": "../c.json"})");
  dir.write("c.json", R"({"extends": "a.json"})");
  std::string msg = config_error([&] { load_config(a); });
  CHECK_THROWS_AS(load_config(a), accel::ConfigError);
  check_message(msg, {"extends cycle: ", a.string() + " -> " + (dir.path / "sub/b.json").string() +
                                             " -> " + (dir.path / "c.json").string() + " -> " +
                                             a.string()});
  fs::path self = dir.write("self.json", R"({"extends": "./self.json"})");
  check_message(config_error([&] { load_config(self); }), {"extends cycle: ", "self.json"});
}

TEST_CASE("config: bad --set syntax and unknown --set path name the assignment") {
  CHECK_THROWS_AS(resolve(json::object(), {"train.epochs"}), accel::ConfigError);
  check_message(resolve_error(json::object(), {"train.epochs"}),
                {"--set \"train.epochs\": expected section.key=value"});
  check_message(resolve_error(json::object(), {"=5"}), {"--set \"=5\""});
  check_message(resolve_error(json::object(), {"train.epoch=5"}),
                {"--set \"train.epoch=5\": unknown key \"train.epoch\"", "valid keys in \"train\"",
                 "did you mean \"train.epochs\"?"});
  check_message(resolve_error(json::object(), {"trian.epochs=5"}),
                {"--set \"trian.epochs=5\": unknown section \"trian\"", "did you mean \"train\"?"});
  check_message(resolve_error(json::object(), {"train=5"}), {"\"train\" is a section"});
  check_message(resolve_error(json::object(), {"extends=x.json"}), {"--set \"extends=x.json\""});
  check_message(resolve_error(json::object(), {"optim.lr=abc"}),
                {"--set \"optim.lr=abc\": optim.lr: expected a number > 0, got \"abc\""});
}

TEST_CASE("config: explain lists every field with type and default in aligned columns") {
  std::string text = explain_schema();
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (const auto& p : kAllPaths) {
    bool found = false;
    for (const auto& line : lines) found = found || line.rfind(p + " ", 0) == 0;
    CHECK_MESSAGE(found, "explain has no line for " << p);
  }
  CHECK(has(text, "extends"));
  CHECK(has(text, "\"vit_tiny_fmnist\""));
  CHECK(has(text, "16-mixed, bf16-mixed"));
  CHECK(has(text, "bf16=bf16-mixed"));
  // Columns line up: the type column starts at the same offset everywhere.
  size_t col = lines.at(1).find("string");
  int epochs_lines = 0;
  for (const auto& line : lines) {
    if (line.rfind("train.epochs ", 0) != 0) continue;
    ++epochs_lines;
    CHECK(line.find("int") == col);
  }
  CHECK(epochs_lines == 1);
}

TEST_CASE("config: a text preset picks its family, its data kind and the family's defaults") {
  const auto r = resolve({{"model", {{"preset", "distilbert_base"}}}});
  CHECK(r["model"]["arch"] == "distilbert");
  CHECK(r["data"]["dataset"] == "rotten-tomatoes");  // the first text dataset of the table
  CHECK(r["model"]["dropout"] == 0.1);
  CHECK(r["model"]["attention_dropout"] == 0.1);
  CHECK(r["model"]["classifier_dropout"] == 0.2);  // DistilBERT's seq_classif_dropout
  CHECK(r["data"]["max_length"] == 128);
  CHECK(r["data"]["padding"] == "longest");
  // Fields of other families and kinds are left out of the resolved document.
  for (const char* k : {"image_size", "patch_size", "mlp_dim", "type_vocab_size"}) CHECK_FALSE(r["model"].contains(k));
  CHECK_FALSE(r["data"].contains("resize"));
  CHECK_FALSE(r["data"].contains("train_file"));
  const auto b = resolve({{"model", {{"arch", "bert"}}}});
  CHECK(b["model"]["preset"] == "minilm_l6_h384");
  CHECK(b["model"]["classifier_dropout"] == 0.1);
  CHECK(b["model"].contains("type_vocab_size"));
  // The ViT default is unchanged by the text families.
  const auto v = resolve(json::object());
  CHECK(v["model"]["arch"] == "vit");
  CHECK(v["model"]["dropout"] == 0.0);
  CHECK_FALSE(v["model"].contains("hidden"));
  CHECK_FALSE(v["data"].contains("max_length"));
}

TEST_CASE("config: a field of another family, kind of data or dataset is refused naming it") {
  check_message(resolve_error({{"model", {{"arch", "bert"}, {"image_size", 224}}}}),
                {"model.image_size: a vit field", "model.arch is \"bert\""});
  check_message(resolve_error({{"model", {{"dim", 64}}}, {"data", {{"dataset", "imdb"}}}}),
                {"data.dataset: \"imdb\" holds text data, but model.arch \"vit\" reads image"});
  check_message(resolve_error({{"model", {{"hidden", 64}}}}), {"model.hidden: a bert, distilbert or gpt field"});
  check_message(resolve_error({{"model", {{"preset", "bert_base"}}}, {"data", {{"resize", 56}}}}),
                {"data.resize: an image-data field"});
  check_message(resolve_error({{"model", {{"preset", "bert_base"}}}, {"data", {{"text_column", "x"}}}}),
                {"data.text_column: a text-csv field", "data.dataset \"rotten-tomatoes\""});
  check_message(resolve_error({{"model", {{"arch", "distilbert"}, {"type_vocab_size", 2}}}}),
                {"model.type_vocab_size: a bert field"});
  check_message(resolve_error({{"model", {{"arch", "bert"}, {"preset", "vit_b_16"}}}}),
                {"model.preset: \"vit_b_16\" is not one of minilm_l6_h384, bert_base, bert_tiny, custom",
                 "is a vit preset"});
  check_message(resolve_error({{"model", {{"arch", "bert"}, {"init_format", "timm"}}}}),
                {"model.init_format: \"timm\" is not a weight format of model.arch \"bert\""});
  check_message(resolve_error({{"model", {{"preset", "bert_base"}, {"hidden", 100}, {"heads", 12}}}}),
                {"model.heads: 12 does not divide model.hidden 100"});
  check_message(resolve_error({{"model", {{"arch", "bert"}, {"preset", "custom"}}}}),
                {"model.vocab_size: must be set (> 0) when model.preset is \"custom\""});
  check_message(resolve_error({{"model", {{"preset", "bert_base"}}}, {"data", {{"dataset", "text-csv"}}}}),
                {"data.train_file: required when data.dataset is \"text-csv\""});
  check_message(resolve_error({{"model", {{"preset", "bert_base"}}}, {"data", {{"max_length", 1}}}}),
                {"data.max_length", "in [2, 65536]"});
  // --explain says which fields belong where.
  const auto explain = explain_schema();
  CHECK(has(explain, "only for vit"));
  CHECK(has(explain, "default 0.2 for distilbert"));
  CHECK(has(explain, "rotten-tomatoes, rotten-tomatoes-lm, imdb, text-csv, synthetic-text"));
  // The token-stream fields belong to token data, the decoder's to it.
  check_message(resolve_error({{"model", {{"preset", "bert_base"}}}, {"data", {{"packing", "documents"}}}}),
                {"data.packing: a tokens-data field"});
  check_message(resolve_error({{"model", {{"preset", "bert_base"}, {"kv_heads", 2}}}}),
                {"model.kv_heads: a gpt field"});
  check_message(resolve_error({{"model", {{"preset", "gpt_tiny"}, {"heads", 4}, {"kv_heads", 3}}}}),
                {"model.kv_heads: 3 does not divide model.heads 4"});
}

TEST_CASE("config: train.target is a fraction for accuracy and a loss's own value for a language model") {
  // Classification's accuracy: above 1 is refused naming train.target.
  check_message(resolve_error({{"train", {{"target", 1.5}}}}), {"train.target", "1.5", "above 1", "fraction"});
  CHECK(resolve({{"train", {{"target", 0.85}}}})["train"]["target"] == 0.85);
  // causal_lm's loss: 3.5 is a target reached from above.
  const json lm = {{"model", {{"arch", "gpt"}, {"preset", "gpt_tiny"}}},
                   {"data", {{"dataset", "rotten-tomatoes-lm"}}},
                   {"train", {{"target", 3.5}, {"stop_at_target", true}}}};
  const json r = resolve(lm);
  CHECK(r["train"]["task"] == "causal_lm");
  CHECK(r["train"]["target"] == 3.5);
  check_message(resolve_error({{"model", {{"arch", "gpt"}, {"preset", "gpt_tiny"}}},
                               {"data", {{"dataset", "rotten-tomatoes-lm"}}},
                               {"train", {{"stop_at_target", true}}}}),
                {"train.stop_at_target", "validation loss"});
}
