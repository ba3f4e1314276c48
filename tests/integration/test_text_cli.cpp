// Text runs through the real CLI on the real Rotten Tomatoes snippets: the
// real MiniLM finetunes and records its tokens, DDP on 2 ranks equals one
// process on the global batch (batches padded per rank), FSDP and ZeRO-2
// equal DDP, a
// stopped run resumes bitwise, bad text inputs exit 2 naming file and line
// with nothing written, and `tokenize` prints tokenizers' ids.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "accel/util/json.h"

#include "accel/data/catalog.h"
#include "accel/models/bert.h"
#include "accel/train/checkpoint.h"
#include "integration/cli_helpers.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace cli_test;

namespace {

bool have_text_data() {
  return fs::exists(accel::data::text_data_dir() / "rotten-tomatoes" /
                    "rotten_tomatoes_corpus_full.csv.bz2") &&
         fs::exists(accel::data::default_vocab());
}

std::string tiny(int batch, int batches) {
  return " -c " + source("configs/smoke/text-tiny.json") + " --set train.batch_size=" +
         std::to_string(batch) + " --set train.limit_train_batches=" + std::to_string(batches) +
         " -q";
}

nlohmann::json result_of(const fs::path& dir) {
  std::ifstream in(dir / "result.json");
  return nlohmann::json::parse(in);
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The CLI under timeout(1): a command that would wait for ever exits 124.
Outcome run_within(int seconds, const std::string& args) {
  const std::string cmd = "timeout " + std::to_string(seconds) + " " + ACCEL_BENCH_EXE + " " + args + " 2>&1";
  Outcome o;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) o.output.append(buf, n);
  const int status = pclose(pipe);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

}  // namespace

TEST_CASE("cli text: the real MiniLM finetunes on the snippets and records tokenizer, vocab and tokens") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto out = fresh_dir("text-minilm");
  const auto r = run_cli("run -c " + source("configs/text/minilm-rotten-tomatoes.json") +
                         " --set train.limit_train_batches=3 --set train.limit_eval_batches=2"
                         " --set train.warmup_steps=1 --set train.log_every=1 --out " + out.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(has(r.output, "== data: rotten-tomatoes train "));
  CHECK(has(r.output, "texts, max length 128 (padding longest) | tokenizer wordpiece uncased, vocab "));
  CHECK(has(r.output, "== model: BERT 6 x 384"));
  CHECK(has(r.output, "new head (2 classes; the weights have none)"));
  CHECK(has(r.output, "tokens/s"));
  const auto res = result_of(out);
  CHECK(res["schema_version"] == 3);
  CHECK(res["data_kind"] == "text");
  CHECK(res["model"]["arch"] == "bert");
  CHECK(res["tokens_per_s"].get<double>() > res["samples_per_s"].get<double>());
  CHECK_FALSE(res.contains("images_per_s"));
  CHECK(res["data"]["vocab_sha256"].get<std::string>().size() == 64);
  CHECK(res["data"]["class_names"] == nlohmann::json({"rotten", "fresh"}));
  CHECK(res["init"]["loaded"] == 103);
  CHECK(res["init"]["head_new"] == true);
  CHECK(res["steps"] == 3);
  fs::remove_all(out);
}

TEST_CASE("cli text: ddp on 2 ranks, each batch padded to its own longest row, equals one process on the global batch, and fsdp and zero-2 equal ddp") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto one = fresh_dir("text-one"), two = fresh_dir("text-ddp"), fsdp = fresh_dir("text-fsdp");
  const std::string eps = " --set train.loop=fabric --set optim.eps=1e-4";
  auto r = run_cli("run" + tiny(16, 6) + eps + " --out " + one.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + tiny(8, 6) + eps + " --set runtime.devices=2 --set runtime.strategy=ddp --out " +
              two.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + one.string() + " " + two.string() + " --tolerance 5e-5");
  CHECK_MESSAGE(r.code == 0, r.output);
  check_checkpoints_match(one / "checkpoint.ckpt", two / "checkpoint.ckpt", 1.3e-6, 5e-5);
  // FSDP with the encoder layers as units equals DDP.
  r = run_cli("run" + tiny(8, 6) + eps + " --set runtime.devices=2 --set runtime.strategy=fsdp --out " +
              fsdp.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + two.string() + " " + fsdp.string() + " --tolerance 5e-5");
  CHECK_MESSAGE(r.code == 0, r.output);
  check_checkpoints_match(two / "checkpoint.ckpt", fsdp / "checkpoint.ckpt", 1.3e-6, 5e-5);
  const auto d = result_of(two), f = result_of(fsdp);
  CHECK(d["world_size"] == 2);
  CHECK(f["strategy"] == "fsdp");
  // FSDP holds half the model state per rank (rounded to its shards).
  CHECK(f["ranks"][0]["param_bytes"].get<double>() <
        0.6 * d["ranks"][0]["param_bytes"].get<double>());
  // ZeRO-2 equals DDP too, with whole parameters and half the optimizer
  // state and gradients on each rank.
  const auto zero = fresh_dir("text-zero2");
  r = run_cli("run" + tiny(8, 6) + eps +
              " --set runtime.devices=2 --set runtime.strategy=deepspeed_stage_2 --out " +
              zero.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + two.string() + " " + zero.string() + " --tolerance 5e-5");
  CHECK_MESSAGE(r.code == 0, r.output);
  check_checkpoints_match(two / "checkpoint.ckpt", zero / "checkpoint.ckpt", 1.3e-6, 5e-5);
  const auto z = result_of(zero);
  CHECK(z["strategy"] == "deepspeed_stage_2");
  for (int k = 0; k < 2; ++k) {
    const auto& zr = z["ranks"][k];
    const auto& dr = d["ranks"][k];
    CHECK(zr["param_bytes"] == dr["param_bytes"]);
    CHECK(zr["optimizer_bytes"].get<double>() < 0.55 * dr["optimizer_bytes"].get<double>());
    CHECK(zr["grad_bytes"].get<double>() < 0.55 * dr["grad_bytes"].get<double>());
  }
  for (const auto& p : {one, two, fsdp, zero}) fs::remove_all(p);
}

TEST_CASE("cli text: a text run stopped mid-epoch and resumed ends bitwise as the uninterrupted run") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto whole = fresh_dir("text-whole"), first = fresh_dir("text-first"), rest = fresh_dir("text-rest");
  // Dropout on, so the saved RNG state matters.
  const std::string args = tiny(12, 6) + " --set train.epochs=2 --set model.dropout=0.1";
  auto r = run_cli("run" + args + " --out " + whole.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + args + " --set train.max_steps=4 --out " + first.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + args + " --resume " + (first / "checkpoint.ckpt").string() + " --out " + rest.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(result_of(rest)["resumed_from"]["batch_in_epoch"] == 4);
  r = run_cli("compare-losses " + whole.string() + " " + rest.string() + " --tolerance 0");
  CHECK_MESSAGE(r.code == 0, r.output);
  CHECK(has(r.output, "12 steps compared"));
  check_checkpoints_match(whole / "checkpoint.ckpt", rest / "checkpoint.ckpt");
  for (const auto& p : {whole, first, rest}) fs::remove_all(p);
}

TEST_CASE("cli text: bad text inputs exit 2 with one line naming the file or field, nothing written") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  accel_test::TempDir tmp;
  const auto out = tmp / "out";
  auto run = [&](const std::string& sets) { return run_cli("run" + tiny(8, 2) + sets + " --out " + out.string()); };
  struct Case { std::string sets, want; };
  const auto corrupt = tmp.write("rt/rotten_tomatoes_corpus_full.csv.bz2", "BZh91AY&SY not really bzip2");
  const auto vocab = tmp.write("vocab.txt", "[PAD]\n[UNK]\n[SEP]\nthe\n");
  const auto train = tmp.write("train.csv", "text,label\ngood film,pos\nbad film,neg\nok,pos\nmeh,neg\n");
  const auto test = tmp.write("test.csv", "text,label\nfine,pos\nodd,neutral\n");
  const auto bad_label = tmp.write("bad-label.csv", "text,label\ngood film,pos\nbad film,n\xff\xfeg\n");
  const Case cases[] = {
      {" --set data.dataset=text-csv --set data.train_file=" + bad_label.string() +
           " --set data.test_file=" + test.string(),
       bad_label.string() + ":3: the label (column \"label\") is not valid UTF-8"},
      {" --set data.vocab=/dev/zero", "vocab file /dev/zero: not a regular file"},
      {" --set data.root=" + corrupt.parent_path().string(), corrupt.string() + ": "},
      {" --set data.vocab=" + vocab.string(), vocab.string() + ": the vocab has no [CLS]"},
      {" --set data.dataset=text-csv --set data.train_file=" + train.string() + " --set data.test_file=" +
           test.string(),
       test.string() + ":3: label \"neutral\""},
      {" --set model.image_size=224", "model.image_size: a vit field, but this config's model.arch is \"bert\""},
      {" --set data.resize=56", "data.resize: an image-data field"},
      {" --set data.max_length=1024", "data.max_length: 1024 exceeds the model's 512 position embeddings"},
      {" --set data.dataset=fashion-mnist", "data.dataset: \"fashion-mnist\" holds image data, but model.arch \"bert\" reads text"},
      {" --set model.preset=vit_b_16", "(\"vit_b_16\" is a vit preset; set model.arch \"vit\""},
  };
  for (const auto& c : cases) {
    CAPTURE(c.sets);
    const auto r = run(c.sets);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, c.want));
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(out));
  }
}

TEST_CASE("cli text: a FIFO as the vocab is refused at once, and a BOM and the whitespace around labels are not part of the names") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  accel_test::TempDir tmp;
  const auto fifo = tmp / "vocab.txt";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string cmd : {"run" + tiny(8, 2) + " --set data.vocab=" + fifo.string() +
                                    " --out " + (tmp / "o").string(),
                                "tokenize --vocab " + fifo.string() + " --text x",
                                "summary " + fifo.string(),
                                "compare-losses " + fifo.string() + " " + fifo.string()}) {
    CAPTURE(cmd);
    const auto r = run_within(60, cmd);
    INFO(r.output);
    CHECK(r.code == 2);  // not 124: nothing waited for a writer
    CHECK(has(r.output, fifo.string() + ": not a regular file"));
  }
  CHECK_FALSE(fs::exists(tmp / "o"));
  // A spreadsheet's CSV: a byte-order mark before the header, " pos" beside "pos".
  const auto train = tmp.write("train.csv", "\xEF\xBB\xBFtext,label\ngood film,pos\nbad film, neg\n"
                                            "fine film,pos \nawful film,neg\n");
  const auto test = tmp.write("test.csv", "text,label\nnice,pos\ndull,\tneg\n");
  const auto out = tmp / "csv";
  const auto r = run_cli("run" + tiny(2, 1) + " --set data.dataset=text-csv --set data.train_file=" +
                         train.string() + " --set data.test_file=" + test.string() +
                         " --set data.val_fraction=0 --set train.test_weights=last --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(result_of(out)["data"]["class_names"] == nlohmann::json::array({"neg", "pos"}));
}

TEST_CASE("cli text: a config.json beside the weights that describes another network is refused, naming what differs") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  accel_test::TempDir tmp;
  const auto minilm = accel::data::default_vocab().parent_path();
  fs::create_symlink(minilm / "model.safetensors", tmp / "model.safetensors");
  std::ifstream in(minilm / "config.json");
  auto cfg = nlohmann::json::parse(in);
  const std::string run = "run -q --dry-run -c " + source("configs/ladder/text-cpu/t01-plain.json") +
                          " --set model.init_path=" + (tmp / "model.safetensors").string() + " --out " +
                          (tmp / "o").string();
  // MiniLM's own config.json agrees with the preset.
  tmp.write("config.json", cfg.dump());
  auto r = run_cli(run);
  INFO(r.output);
  CHECK(r.code == 0);
  // The same tensors said to be 6 heads (no shape shows it) and relu: refused.
  cfg["num_attention_heads"] = 6;
  cfg["hidden_act"] = "relu";
  tmp.write("config.json", cfg.dump());
  r = run_cli(run);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "model.init_path: the config.json beside " + (tmp / "model.safetensors").string() +
                          " describes another network than the model section builds: "
                          "num_attention_heads 6 (the model: heads 12); hidden_act \"relu\""));
  CHECK_FALSE(fs::exists(tmp / "o"));
}

TEST_CASE("cli text: tokenize prints each line's ids and names a line that is not UTF-8") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  auto r = run_cli("tokenize --text \"A gripping, funny and moving film.\"");
  CHECK(r.code == 0);
  CHECK(r.output == "101 1037 13940 1010 6057 1998 3048 2143 1012 102\n");
  r = run_cli("tokenize --max-length 4 --text \"A gripping, funny and moving film.\"");
  CHECK(r.output == "101 1037 13940 102\n");
  accel_test::TempDir tmp;
  const auto lines = tmp.write("lines.txt", "fine\n\xff\n");
  r = run_cli("tokenize < " + lines.string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "stdin:2: invalid UTF-8 at byte 0"));
  r = run_cli("tokenize --vocab " + (tmp / "none.txt").string() + " --text x");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--vocab: missing file"));
  // The decoder's byte-level BPE from the installed GGUF: the text, then <|endoftext|>.
  REQUIRE_MESSAGE(fs::exists(accel::data::default_vocab("gguf-bpe")), "the SmolLM2 GGUF missing: run scripts/setup.sh");
  r = run_cli("tokenize --tokenizer gguf-bpe --text \"Hello, world! It's 2024.\"");
  CHECK(r.code == 0);
  CHECK(r.output == "19556 28 905 17 657 506 216 34 32 34 36 30 0\n");
  r = run_cli("tokenize --tokenizer gguf-bpe --max-length 3 --text \"Hello, world!\"");
  CHECK(r.output == "19556 28 0\n");
  r = run_cli("tokenize --tokenizer gguf-bpe --vocab " + lines.string() + " --text x");
  CHECK(r.code == 2);
  CHECK(has(r.output, lines.string() + ": gguf: not a GGUF file"));
  r = run_cli("tokenize --tokenizer sentencepiece --text x");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--tokenizer"));
}

TEST_CASE("cli text: bf16-mixed with fixed padding trains text through the fabric loop") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto out = fresh_dir("text-bf16");
  const auto r = run_cli("run" + tiny(8, 4) + " --set train.loop=fabric --set runtime.precision=bf16-mixed"
                         " --set data.padding=max_length --set data.max_length=64 --out " + out.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto res = result_of(out);
  CHECK(res["status"] == "ok");
  CHECK(res["config"]["runtime"]["precision"] == "bf16-mixed");
  // Fixed padding: every trained row counts 64 tokens of FLOPs.
  CHECK(res["flops_per_sample"].get<double>() ==
        accel::models::text_forward_flops(accel::models::text_preset("bert", "bert_tiny"), 64));
  CHECK(res["model_flops_per_s"].get<double>() > 0);
  // The step's counted matmuls are the analytic count: autocast's second
  // dispatch of each projection is not counted again.
  REQUIRE(res["counters"].is_object());
  CHECK(std::fabs(res["counters"]["flops_counted_over_analytic"].get<double>() - 1.0) <= 0.01);
  for (const auto& e : res["epochs"]) CHECK(std::isfinite(e["loss"].get<double>()));
  fs::remove_all(out);
}

TEST_CASE("cli text: export never replaces a run's own config.json with transformers' and refuses a folder or its input as -o") {
  REQUIRE_MESSAGE(have_text_data(), "text data missing: run scripts/setup.sh");
  const auto out = fresh_dir("text-export");
  auto r = run_cli("run" + tiny(8, 2) + " --set train.epochs=1 --out " + out.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto ckpt = (out / "checkpoint.ckpt").string();
  const auto run_config = out / "config.json";
  std::ifstream in(run_config);
  const std::string before((std::istreambuf_iterator<char>(in)), {});
  // Into the run's own folder: config.json there is the run's, even with --force.
  for (const char* force : {"", " --force"}) {
    r = run_cli("export " + ckpt + " -o " + (out / "model.safetensors").string() + force);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, "is an accel-bench run's config"));
  }
  std::ifstream again(run_config);
  CHECK(std::string((std::istreambuf_iterator<char>(again)), {}) == before);
  // A folder as -o, and the checkpoint itself (it would be overwritten while read).
  r = run_cli("export " + ckpt + " -o " + out.string() + " --force");
  CHECK(r.code == 2);
  CHECK(has(r.output, "is a folder; give the file to write"));
  r = run_cli("export " + ckpt + " -o " + ckpt + " --force");
  CHECK(r.code == 2);
  CHECK(has(r.output, "is the checkpoint being exported"));
  CHECK(fs::file_size(ckpt) > 0);
  // Elsewhere it writes both files.
  r = run_cli("export " + ckpt + " -o " + (out / "hf" / "model.safetensors").string());
  CHECK_MESSAGE(r.code == 0, r.output);
  CHECK(fs::exists(out / "hf" / "config.json"));
}

