// Language modelling through the real CLI on the real Rotten Tomatoes
// snippets: the GPT-style decoder learns their next tokens from packed
// windows or padded documents and records the validation loss and tokens;
// a family, task or dataset that cannot go with it is refused naming the field.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/data/catalog.h"
#include "integration/cli_helpers.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace cli_test;

namespace {

bool have_text_data() {
  return fs::exists(accel::data::text_data_dir() / "rotten-tomatoes" / "rotten_tomatoes_corpus_full.csv.bz2") &&
         fs::exists(accel::data::default_vocab());
}

nlohmann::json result_of(const fs::path& dir) {
  std::ifstream in(dir / "result.json");
  return nlohmann::json::parse(in);
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("cli lm: the decoder learns the snippets' next tokens from packed windows and records the validation loss and tokens") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto out = fresh_dir("lm-packed");
  // A target of a loss is reached downwards (the one validation, at the epoch's end).
  const auto r = run_cli("run -c " + source("configs/smoke/lm-tiny.json") + " --set train.target=9.0 --out " +
                         out.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(has(r.output, "== target reached: validation "));
  CHECK(has(r.output, " <= 9.0000 (perplexity "));
  CHECK(has(r.output, "== data: rotten-tomatoes-lm train "));
  CHECK(has(r.output, "token windows of 64 (training: documents packed; validation and test: a document a row) | tokenizer wordpiece uncased"));
  CHECK(has(r.output, "== model: decoder (gpt2 layout, layernorm, learned positions, gelu) 2 x 128"));
  // The metric is a loss, written as one (with its perplexity), not as a percent.
  CHECK(has(r.output, "Epoch: 0001/0001 | Train loss: "));
  CHECK(has(r.output, " | Val loss: "));
  CHECK(has(r.output, "(perplexity "));
  CHECK_FALSE(has(r.output, "Val acc."));
  const auto res = result_of(out);
  CHECK(res["status"] == "ok");
  CHECK(res["plan"]["task"]["name"] == "causal_lm");
  CHECK(res["plan"]["task"]["metric"] == "loss");
  CHECK(res["data"]["kind"] == "tokens");
  CHECK(res["data"]["packing"] == "packed");
  const auto& streams = res["data"]["token_streams"];
  CHECK(streams["train"]["windows"].get<int64_t>() == res["data"]["train"].get<int64_t>());
  CHECK(streams["train"]["documents"].get<int64_t>() > 5000);
  CHECK(streams["val"]["windows"].get<int64_t>() > 0);
  // Validation and test are a document a row whatever training packs.
  CHECK(streams["train"]["packing"] == "packed");
  CHECK(streams["val"]["packing"] == "documents");
  CHECK(streams["test"]["packing"] == "documents");
  CHECK(streams["val"]["windows"] == streams["val"]["documents"]);
  CHECK(res["model"]["vocab_size"] == 30522);  // the tokenizer's
  CHECK(res["tokens_per_s"].get<double>() > 0);
  // Every position of a packed window predicts: 64 tokens a sample.
  CHECK(res["tokens_per_s"].get<double>() == doctest::Approx(64.0 * res["samples_per_s"].get<double>()));
  // The loss is a mean over tokens: from about ln 30522 = 10.3 at random
  // init, falling as the decoder learns the snippets' words.
  const auto losses = step_losses(out / "metrics.csv");
  REQUIRE(losses.size() == 30);
  CHECK(losses.front() > 9.5);
  CHECK(losses.front() < 11.0);
  CHECK(losses.back() < losses.front() - 1.5);
  // The metric is the validation loss itself (lower is better); the running
  // training metric is the steps' losses over their tokens (equal in packed
  // windows: their mean).
  const auto& epoch = res["epochs"][0];
  CHECK(epoch["train_acc"].get<double>() == doctest::Approx(epoch["loss"].get<double>()).epsilon(1e-9));
  // No class lists of the vocabulary's length.
  CHECK(res["data"]["class_ids"].empty());
  CHECK_FALSE(res["data"].contains("class_counts"));
  CHECK(epoch["val_acc"].get<double>() == doctest::Approx(epoch["val_loss"].get<double>()));
  CHECK(epoch["val_acc"].get<double>() < 9.0);
  CHECK(res["test_acc"].get<double>() < 9.0);
  CHECK(res["test_acc"].get<double>() == doctest::Approx(res["test_loss"].get<double>()));
  CHECK(res["target"]["reached"] == true);
  CHECK(res["target"]["val_acc"].get<double>() <= 9.0);
  CHECK(res["plan"]["task"]["proportion"] == false);
  CHECK(res["plan"]["task"]["higher_is_better"] == false);
  // The record reads back as a loss: summary names it, and a report of a set
  // holding the run shows it as itself, never as a percent.
  const auto s = run_cli("summary " + (out / "result.json").string());
  REQUIRE_MESSAGE(s.code == 0, s.output);
  CHECK(has(s.output, "| loss "));
  const auto set = fresh_dir("lm-set");
  fs::create_directories(set / "00-lm");
  fs::copy(out, set / "00-lm", fs::copy_options::recursive);
  const auto rep = run_cli("report " + set.string());
  REQUIRE_MESSAGE(rep.code == 0, rep.output);
  std::ifstream report(set / "report.md");
  const std::string md((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  INFO(md);
  CHECK(has(md, "| test loss |"));
  CHECK_FALSE(has(md, "| test acc |"));
  // The history takes the set: its times and memory, and the loss as its own
  // measure (a loss is not an accuracy to trend).
  const auto db = (fresh_dir("lm-history") / "h.sqlite").string();
  fs::create_directories(fs::path(db).parent_path());
  const auto h = run_cli("history add " + set.string() + " --db " + db);
  CHECK_MESSAGE(h.code == 0, h.output);
  const auto exported = run_cli("history export --db " + db);
  CHECK_MESSAGE(exported.code == 0, exported.output);
  CHECK(has(exported.output, "\"rung\":\"00-lm\""));
  CHECK(has(exported.output, "\"test_acc\":null"));
  CHECK(has(exported.output, "\"test_loss\":"));
  CHECK_FALSE(has(exported.output, "\"test_loss\":null"));
  const auto trend = run_cli("history show --db " + db + " --measure \"test loss\"");
  CHECK_MESSAGE(trend.code == 0, trend.output);
  CHECK(has(trend.output, "| 00-lm |"));
  CHECK(has(trend.output, "| test loss |"));
}

TEST_CASE("cli lm: padded documents train too and the eager attention matches the fused one and a family or task or dataset that cannot go with the decoder is refused") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto out = fresh_dir("lm-documents");
  const auto r = run_cli("run -c " + source("configs/smoke/lm-tiny.json") +
                         " --set data.packing=documents --set train.limit_train_batches=4 -q --out " + out.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto res = result_of(out);
  CHECK(res["data"]["packing"] == "documents");
  // A document a row: most of a 64-token row is padding, so fewer tokens a sample.
  CHECK(res["tokens_per_s"].get<double>() < 40.0 * res["samples_per_s"].get<double>());
  CHECK(res["data"]["token_streams"]["train"]["windows"].get<int64_t>() ==
        res["data"]["token_streams"]["train"]["documents"].get<int64_t>());
  // runtime.attention explicit: the eager matmul-softmax-matmul with the
  // causal mask made, recorded; the same losses as the fused kernel's.
  const auto fused_dir = fresh_dir("lm-fused"), explicit_dir = fresh_dir("lm-explicit");
  const std::string three = " --set train.limit_train_batches=3 --set train.limit_eval_batches=1 -q --out ";
  REQUIRE(run_cli("run -c " + source("configs/smoke/lm-tiny.json") + three + fused_dir.string()).code == 0);
  const auto e = run_cli("run -c " + source("configs/smoke/lm-tiny.json") + " --set runtime.attention=explicit" + three +
                         explicit_dir.string());
  REQUIRE_MESSAGE(e.code == 0, e.output);
  CHECK(result_of(explicit_dir)["env"]["attention_kernel"] == "explicit");
  CHECK(result_of(fused_dir)["env"]["attention_kernel"] != "explicit");
  // Model FLOPs count the positions that predict a real token: a padded
  // row's per-sample FLOPs are a packed window's times its share of real
  // tokens (the same model and width), so MFU never rewards padding.
  const auto packed = result_of(fused_dir);
  const double real_share = res["tokens_per_s"].get<double>() / (64.0 * res["samples_per_s"].get<double>());
  CHECK(res["flops_per_sample"].get<double>() ==
        doctest::Approx(packed["flops_per_sample"].get<double>() * real_share).epsilon(0.02));
  const auto lf = step_losses(fused_dir / "metrics.csv"), le = step_losses(explicit_dir / "metrics.csv");
  REQUIRE(lf.size() == 3);
  REQUIRE(le.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(le[i] == doctest::Approx(lf[i]).epsilon(1e-4));
  // The decoder on labelled text, and with the classification task.
  auto bad = run_cli("run -c " + source("configs/smoke/lm-tiny.json") + " --set data.dataset=rotten-tomatoes --dry-run");
  CHECK(bad.code == 2);
  CHECK(has(bad.output, "data.dataset: \"rotten-tomatoes\" holds text data, but model.arch \"gpt\" reads tokens"));
  bad = run_cli("run -c " + source("configs/smoke/lm-tiny.json") + " --set train.task=classification --dry-run");
  CHECK(bad.code == 2);
  CHECK(has(bad.output, "train.task: \"classification\" needs a classification head, but model.arch \"gpt\" predicts tokens"));
  bad = run_cli("run -c " + source("configs/smoke/lm-tiny.json") + " --set data.packing=zip --dry-run");
  CHECK(bad.code == 2);
  CHECK(has(bad.output, "data.packing"));
}

TEST_CASE("cli lm: ddp on 2 ranks equals one process on the global batch and fsdp with the tied output projection equals ddp and the chunked loss trains as the whole logits do") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto one = fresh_dir("lm-one"), ddp = fresh_dir("lm-ddp"), fsdp = fresh_dir("lm-fsdp");
  auto cmd = [](int batch) {
    return "run -c " + source("configs/smoke/lm-tiny.json") + " --set train.loop=fabric --set optim.eps=1e-4" +
           " --set train.limit_train_batches=4 --set train.limit_eval_batches=2 -q --set train.batch_size=" +
           std::to_string(batch);
  };
  auto r = run_cli(cmd(16) + " --out " + one.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli(cmd(8) + " --set runtime.devices=2 --set runtime.strategy=ddp --out " + ddp.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + one.string() + " " + ddp.string() + " --tolerance 1e-4");
  CHECK_MESSAGE(r.code == 0, r.output);
  // FSDP: the embedding matrix is unit 0's, freed after the embeddings and
  // gathered again for the tied output projection, forward and backward.
  r = run_cli(cmd(8) + " --set runtime.devices=2 --set runtime.strategy=fsdp --out " + fsdp.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + ddp.string() + " " + fsdp.string() + " --tolerance 1e-4");
  CHECK_MESSAGE(r.code == 0, r.output);
  const auto d = result_of(ddp), f = result_of(fsdp);
  CHECK(f["strategy"] == "fsdp");
  CHECK(f["test_acc"].get<double>() == doctest::Approx(d["test_acc"].get<double>()).epsilon(1e-4));
  CHECK(f["ranks"][0]["param_bytes"].get<double>() < 0.6 * d["ranks"][0]["param_bytes"].get<double>());
  // The loss fused with the output projection over chunks of 100 tokens (not
  // a divisor of a batch's 1,024): the same losses, alone and under FSDP's
  // gathers around the tied head, and the same validation and test loss.
  const auto chunked = fresh_dir("lm-chunked"), fsdp_chunked = fresh_dir("lm-fsdp-chunked");
  r = run_cli(cmd(16) + " --set train.loss_chunk_tokens=100 --out " + chunked.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + one.string() + " " + chunked.string() + " --tolerance 1e-4");
  CHECK_MESSAGE(r.code == 0, r.output);
  r = run_cli(cmd(8) + " --set train.loss_chunk_tokens=100 --set runtime.devices=2 --set runtime.strategy=fsdp --out " +
              fsdp_chunked.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + fsdp.string() + " " + fsdp_chunked.string() + " --tolerance 1e-4");
  CHECK_MESSAGE(r.code == 0, r.output);
  const auto o = result_of(one), c = result_of(chunked);
  CHECK(c["config"]["train"]["loss_chunk_tokens"] == 100);
  CHECK(c["epochs"][0]["val_loss"].get<double>() == doctest::Approx(o["epochs"][0]["val_loss"].get<double>()).epsilon(1e-4));
  CHECK(c["test_acc"].get<double>() == doctest::Approx(o["test_acc"].get<double>()).epsilon(1e-4));
  CHECK(result_of(fsdp_chunked)["test_acc"].get<double>() == doctest::Approx(f["test_acc"].get<double>()).epsilon(1e-4));
}

TEST_CASE("cli lm: recomputing every block in the backward trains the same losses alone, under ddp and under fsdp, and a family that cannot is refused") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  // Dropout on, so the recomputed blocks must draw the forward's masks again.
  auto cmd = [](int batch, const std::string& extra, const fs::path& out) {
    return "run -c " + source("configs/smoke/lm-tiny.json") + " --set train.loop=fabric --set optim.eps=1e-4" +
           " --set model.dropout=0.1 --set train.limit_train_batches=4 --set train.limit_eval_batches=2 -q" +
           " --set train.batch_size=" + std::to_string(batch) + " " + extra + " --out " + out.string();
  };
  const std::string recompute = "--set train.activation_checkpointing=full";
  for (const std::string strategy : {"auto", "ddp", "fsdp"}) {
    CAPTURE(strategy);
    const bool two = strategy != "auto";
    const std::string ranks = two ? "--set runtime.devices=2 --set runtime.strategy=" + strategy : "";
    const auto kept = fresh_dir("lm-kept-" + strategy), again = fresh_dir("lm-recomputed-" + strategy);
    auto r = run_cli(cmd(two ? 8 : 16, ranks, kept));
    REQUIRE_MESSAGE(r.code == 0, r.output);
    r = run_cli(cmd(two ? 8 : 16, ranks + " " + recompute, again));
    REQUIRE_MESSAGE(r.code == 0, r.output);
    r = run_cli("compare-losses " + kept.string() + " " + again.string() + " --tolerance 1e-5");
    CHECK_MESSAGE(r.code == 0, r.output);
    const auto k = result_of(kept), a = result_of(again);
    CHECK(a["config"]["train"]["activation_checkpointing"] == "full");
    CHECK(a["epochs"][0]["val_loss"].get<double>() == doctest::Approx(k["epochs"][0]["val_loss"].get<double>()).epsilon(1e-5));
  }
  // The ViT has no blocks to run again here: the schema refuses it, naming the field.
  const auto vit = fresh_dir("lm-vit-recompute");
  const auto r = run_cli("run -c " + source("configs/smoke/scratch-smoke.json") + " " + recompute + " --out " + vit.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("train.activation_checkpointing") != std::string::npos);
}

TEST_CASE("cli lm: SmolLM2's GGUF finetunes on the snippets through its own BPE, far below a scratch decoder's loss, and another vocabulary with it is refused") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto gguf = accel::data::default_vocab("gguf-bpe");
  REQUIRE_MESSAGE(fs::exists(gguf), gguf.string() << " missing: run scripts/setup.sh");
  const std::string base =
      "run -c " + source("configs/smoke/lm-tiny.json") +
      " --set model.preset=smollm2_135m --set model.layers=0 --set data.tokenizer=gguf-bpe --set data.max_length=32"
      " --set data.train_subset=64 --set train.batch_size=4 --set train.limit_train_batches=3"
      " --set train.limit_eval_batches=2 --set train.eval_batch_size=16 --set train.loss_chunk_tokens=64"
      " --set optim.lr=5e-5 --set train.save_checkpoint=false";
  const auto out = fresh_dir("lm-gguf");
  auto r = run_cli(base + " --set model.init=gguf --set model.init_path=" + gguf.string() + " --out " + out.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(has(r.output, "tokenizer byte-level bpe (smollm) of SmolLM2-135M-Instruct.Q4_1.gguf"));
  CHECK(has(r.output, "== model: decoder (llama layout, rmsnorm, rotary positions, swiglu) 30 x 576, heads 9 (3 key-value)"));
  CHECK(has(r.output, "== init: "));
  const auto res = result_of(out);
  CHECK(res["status"] == "ok");
  CHECK(res["init"]["kind"] == "gguf");
  CHECK(res["init"]["loaded"] == 272);
  CHECK(res["model"]["vocab_size"] == 49152);
  CHECK(res["model"]["rope_theta"] == 100000.0);
  // Pretrained, the model already knows English: a validation loss far
  // below a fresh decoder's ln 49152 = 10.8 after the same three steps.
  const double pretrained = res["epochs"].back()["val_loss"].get<double>();
  const auto scratch_dir = fresh_dir("lm-gguf-scratch");
  r = run_cli(base + " --out " + scratch_dir.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const double scratch = result_of(scratch_dir)["epochs"].back()["val_loss"].get<double>();
  MESSAGE("validation loss after 3 steps: pretrained " << pretrained << ", scratch " << scratch);
  CHECK(pretrained < 6.0);
  CHECK(scratch > pretrained + 3.0);
  // The GGUF's weights with BERT's WordPiece ids: refused, naming the fix.
  const auto bad = fresh_dir("lm-gguf-wordpiece");
  r = run_cli(base + " --set data.tokenizer=wordpiece --set model.init=gguf --set model.init_path=" + gguf.string() +
              " --out " + bad.string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "data.tokenizer: \"wordpiece\" gives other ids than the GGUF model.init_path"));
  CHECK(has(r.output, "set data.tokenizer \"gguf-bpe\""));
  CHECK_FALSE(fs::exists(bad / "result.json"));  // refused before anything is written
  // Another file's BPE under the same weights: a copy is the same file, another one is not.
  accel_test::TempDir tmp;
  const auto copy = tmp / "copy.gguf";
  fs::copy_file(gguf, copy);
  const auto other = tmp.write("other.gguf", "GGUF");
  r = run_cli(base + " --set data.vocab=" + other.string() + " --set model.init=gguf --set model.init_path=" +
              copy.string() + " --out " + bad.string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "data.vocab: " + other.string() + " is another file than the GGUF model.init_path"));
  r = run_cli(base + " --set data.vocab=" + gguf.string() + " --set model.init=gguf --set model.init_path=" +
              copy.string() + " --set train.limit_train_batches=1 --set train.limit_eval_batches=1 --out " +
              (tmp / "copy-run").string());
  CHECK_MESSAGE(r.code == 0, r.output);
}
