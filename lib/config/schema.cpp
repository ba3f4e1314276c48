// The schema table: every field of RunConfig with its JSON path, type,
// default, one-line doc and range or choices. Loading, validation and
// `accel-bench config --explain` all read this table, so adding a field here
// (and to the struct and to_run_config) is the whole job.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "accel/config/run_config.h"
#include "accel/data/catalog.h"
#include "accel/dist/catalog.h"
#include "accel/models/catalog.h"
#include "accel/plan/accelerator.h"
#include "accel/precision/catalog.h"
#include "accel/text/tokenizers.h"
#include "accel/train/task.h"
#include "schema.h"

namespace accel::config::detail {
namespace {

using nlohmann::json;

Field make(const char* path, Type type, json def, const char* doc) {
  Field f;
  f.path = path;
  auto dot = f.path.find('.');
  f.section = dot == std::string::npos ? "" : f.path.substr(0, dot);
  f.key = dot == std::string::npos ? f.path : f.path.substr(dot + 1);
  f.type = type;
  f.def = std::move(def);
  f.doc = doc;
  return f;
}
Field i(const char* p, json v, const char* doc) { return make(p, Type::Int, v, doc); }
Field d(const char* p, double v, const char* doc) { return make(p, Type::Float, v, doc); }
Field b(const char* p, bool v, const char* doc) { return make(p, Type::Bool, v, doc); }
Field s(const char* p, const char* v, const char* doc) { return make(p, Type::String, v, doc); }
// runtime.precision: the precision catalog's names and Lightning's aliases.
Field precision_field(Field f) {
  f.one_of(precision::precision_names());
  for (const auto& [from, to] : precision::precision_aliases()) f.alias(from, to);
  return f;
}

// Dims that a preset supplies when left at 0.
Field dim(const char* p, const char* doc) { return i(p, 0, doc).at_least(0); }

// Choices read from the registries, so no list is written twice.
std::vector<std::string> archs() {
  std::vector<std::string> out;
  for (const auto& f : models::model_catalog()) out.push_back(f.arch);
  return out;
}
std::vector<std::string> presets() {
  std::vector<std::string> out;
  for (const auto& f : models::model_catalog()) out.insert(out.end(), f.presets.begin(), f.presets.end());
  out.push_back("custom");
  return out;
}
std::vector<std::string> formats() {
  std::vector<std::string> out = {"auto"};
  for (const auto& f : models::model_catalog()) {
    for (const auto& x : f.formats)
      if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  return out;
}
std::vector<std::string> datasets() {
  std::vector<std::string> out;
  for (const auto& d : data::dataset_catalog()) out.push_back(d.name);
  return out;
}

std::vector<Field> build_table() {
  return {
      s("name", "", "run name, used in result records"),
      s("description", "", "free text kept with the results"),

      s("model.arch", "vit",
        "model family; unset = the family of model.preset (vit when neither is given)")
          .one_of(archs()),
      s("model.preset", "vit_tiny_fmnist",
        "architecture preset of model.arch (default: the family's first); custom = give every dim")
          .one_of(presets()),
      dim("model.image_size", "input side in pixels; 0 = from preset").only({"vit"}),
      dim("model.in_channels", "input channels; 0 = the dataset's (else must equal it)").only({"vit"}),
      dim("model.patch_size", "patch side in pixels; 0 = from preset").only({"vit"}),
      dim("model.dim", "embedding width; 0 = from preset").only({"vit"}),
      dim("model.depth", "transformer blocks; 0 = from preset").only({"vit"}),
      dim("model.heads", "attention heads; 0 = from preset"),
      dim("model.mlp_dim", "MLP hidden width; 0 = from preset").only({"vit"}),
      i("model.vocab_size", 0, "token vocabulary (word embeddings); 0 = from preset")
          .at_least(0).kind(IntKind::I64).only({"bert", "distilbert", "gpt"}),
      i("model.max_positions", 0, "position embeddings (the longest input); 0 = from preset")
          .at_least(0).kind(IntKind::I64).only({"bert", "distilbert", "gpt"}),
      i("model.type_vocab_size", 0, "token-type embeddings; 0 = from preset")
          .at_least(0).kind(IntKind::I64).only({"bert"}),
      dim("model.hidden", "hidden width; 0 = from preset").only({"bert", "distilbert", "gpt"}),
      dim("model.layers", "encoder (decoder) layers; 0 = from preset").only({"bert", "distilbert", "gpt"}),
      dim("model.intermediate", "feed-forward width; 0 = from preset").only({"bert", "distilbert", "gpt"}),
      dim("model.kv_heads", "key-value heads (grouped-query attention; divides model.heads); 0 = from preset")
          .only({"gpt"}),
      i("model.num_classes", 0, "classifier outputs; 0 = classes the data yields").at_least(0),
      d("model.dropout", 0.0, "dropout after embeddings and in the residual branches")
          .at_least(0).below(1).default_for("bert", 0.1).default_for("distilbert", 0.1),
      d("model.attention_dropout", 0.0, "dropout on attention weights")
          .at_least(0).below(1).default_for("bert", 0.1).default_for("distilbert", 0.1),
      d("model.classifier_dropout", 0.1,
        "dropout before the classifier (BERT: hidden_dropout_prob; DistilBERT: seq_classif_dropout)")
          .at_least(0).below(1).only({"bert", "distilbert"}).default_for("distilbert", 0.2),
      s("model.init", "random",
        "weights to start from; also {\"checkpoint\": PATH}, {\"safetensors\": PATH} or {\"gguf\": PATH}")
          .one_of({"random", "checkpoint", "safetensors", "gguf"}),
      s("model.init_path", "", "checkpoint, safetensors or GGUF file for init (relative to the cwd)"),
      b("model.init_strict", true, "init: missing or unexpected tensors are an error"),
      s("model.init_head", "auto",
        "init: auto = replace the head only when its class count differs; replace = always "
        "(a new task)").one_of({"auto", "replace"}),
      s("model.init_format", "auto",
        "safetensors parameter names (vit: torchvision, timm, hf; text families: hf)")
          .one_of(formats()),

      s("data.dataset", "fashion-mnist",
        "dataset to train and evaluate on (default: the first of the model's kind of data)")
          .one_of(datasets()),
      s("data.root", "", "dataset directory; \"\" = the dataset's default location"),
      make("data.classes", Type::IntList, json::array(),
           "class subset, remapped to 0..n-1; [] = all")
          .at_least(0).no_duplicates(),
      i("data.train_subset", 0,
        "training rows kept (seeded by train.seed, balanced over the classes); for a token "
        "stream, training documents kept before packing (seeded by data.split_seed), so every "
        "packing trains the same text; 0 = all")
          .at_least(0).kind(IntKind::I64),
      d("data.val_fraction", 0.1, "fraction of train held out for validation")
          .at_least(0).below(1),
      i("data.resize", 0, "square side images are resized to; 0 = the model's image_size (else must equal it)")
          .at_least(0).only({"image"}),
      b("data.normalize", true, "normalise with the dataset's mean and std").only({"image"}),
      i("data.synthetic_train", 1024, "synthetic datasets: training rows")
          .at_least(1).kind(IntKind::I64),
      i("data.synthetic_test", 256, "synthetic datasets: test rows")
          .at_least(1).kind(IntKind::I64),
      i("data.prefetch", 2, "batches prepared ahead of training").at_least(0),
      s("data.vocab", "",
        "the tokenizer's file (WordPiece: a vocab.txt; gguf-bpe: a .gguf); \"\" = the one scripts/setup.sh "
        "installs for data.tokenizer (the all-MiniLM-L6-v2 vocab, BERT's uncased; SmolLM2-135M-Instruct's GGUF)").only({"rotten-tomatoes", "rotten-tomatoes-lm", "imdb", "text-csv"}),
      s("data.tokenizer", "wordpiece",
        "what turns the texts into ids, a row of the tokenizer registry (over data.vocab)")
          .one_of(text::tokenizer_choices()).only({"rotten-tomatoes", "rotten-tomatoes-lm", "imdb", "text-csv"}).since_results(),
      i("data.max_length", 128,
        "tokens per text with [CLS] and [SEP]; longer texts are truncated (the blog: 512)")
          .at_least(2).at_most(65536).kind(IntKind::I64).only({"text", "tokens"}),
      s("data.padding", "longest",
        "longest = pad each batch to its longest text; max_length = always to data.max_length "
        "(the blog's padding, and what a CUDA Graph needs)")
          .one_of({"longest", "max_length"}).only({"text"}),
      s("data.packing", "packed",
        "token streams, how training fills its rows: packed = the documents concatenated and cut "
        "into windows of data.max_length tokens (every position trains); documents = one document "
        "a row, padded to data.max_length. Validation and test are always a document a row, so "
        "every packing is scored on the same predictions")
          .one_of({"packed", "documents"}).only({"tokens"}),
      b("data.lowercase", true,
        "uncased WordPiece: lowercase and strip accents, as uncased vocabularies need")
          .only({"rotten-tomatoes", "rotten-tomatoes-lm", "imdb", "text-csv"}),
      d("data.test_fraction", 0.2,
        "share of the pooled reviews held out for test (rotten-tomatoes: by movie; imdb: 10k of the 50k, "
        "as the blog)").above(0).below(1).only({"rotten-tomatoes", "rotten-tomatoes-lm", "imdb"}),
      i("data.split_seed", 123,
        "seed of the train/val/test split of the pooled reviews (not train.seed: runs with other "
        "seeds share one test set)").at_least(0).kind(IntKind::U64).only({"rotten-tomatoes", "rotten-tomatoes-lm", "imdb"}),
      s("data.train_file", "", "training CSV with a header row (relative to the cwd)").only({"text-csv"}),
      s("data.test_file", "", "test CSV, the same columns").only({"text-csv"}),
      s("data.text_column", "text", "the column holding the text").not_empty().only({"text-csv"}),
      s("data.label_column", "label",
        "the column holding the label; label names map to classes in sorted order")
          .not_empty().only({"text-csv"}),

      s("optim.name", "adam", "optimizer").one_of({"adam", "adamw", "sgd"}),
      d("optim.lr", 5e-5, "learning rate").above(0),
      d("optim.weight_decay", 0.0, "weight decay").at_least(0),
      d("optim.momentum", 0.9, "momentum (sgd only)").at_least(0).below(1),
      d("optim.beta1", 0.9, "Adam beta1").at_least(0).below(1),
      d("optim.beta2", 0.999, "Adam beta2").at_least(0).below(1),
      d("optim.eps", 1e-8, "Adam epsilon").above(0),
      s("optim.implementation", "fused",
        "adam/adamw: \"fused\", on CPU float32 parameters accel-bench's one-pass kernel "
        "(kernels/adam.h; equal to torch's update to float32 rounding, not bitwise), on CUDA "
        "float32 parameters ATen's multi-tensor kernel (torch.optim's fused=True); or "
        "\"torch\", torch::optim's op-by-op update; sgd always takes torch's")
          .one_of({"fused", "torch"}),
      s("optim.scheduler", "none",
        "learning-rate schedule over the run's optimizer steps: none = constant; cosine = "
        "linear warm-up then cosine decay to optim.min_lr (the article's rung 07)")
          .one_of({"none", "cosine"}),
      i("optim.warmup_steps", 0, "cosine: optimizer steps of linear warm-up from 0 to optim.lr")
          .at_least(0).kind(IntKind::I64),
      d("optim.min_lr", 0.0, "cosine: learning rate at the last step").at_least(0),

      i("train.epochs", 10, "passes over the training set").at_least(1),
      i("train.batch_size", 16, "training batch size per device").at_least(1),
      i("train.eval_batch_size", 0, "evaluation batch size; 0 = batch_size").at_least(0),
      i("train.seed", 123, "seed for init, subsets, shuffling").at_least(0).kind(IntKind::U64),
      i("train.log_every", 300, "log every N training steps").at_least(1),
      i("train.limit_train_batches", 0, "training batches per epoch; 0 = all")
          .at_least(0).kind(IntKind::I64),
      i("train.limit_eval_batches", 0, "evaluation batches; 0 = all")
          .at_least(0).kind(IntKind::I64),
      i("train.warmup_steps", 5, "steps left out of step-time statistics").at_least(0),
      s("train.loop", "plain", "plain = the article's PyTorch loop; fabric = the same loop "
        "through the Fabric-style facade (needed for other precisions and strategies)")
          .one_of({"plain", "fabric"}),
      d("train.grad_clip", 0.0, "clip the gradient norm to this (fabric loop); 0 = off")
          .at_least(0),
      i("train.max_steps", 0, "stop after this many optimizer steps in all; 0 = no limit")
          .at_least(0).kind(IntKind::I64),
      i("train.checkpoint_every", 0, "save a checkpoint every N steps; 0 = only the final one")
          .at_least(0).kind(IntKind::I64),
      b("train.save_checkpoint", true, "save OUT/checkpoint.ckpt at the end of the run"),
      s("train.task", "classification",
        "what the run learns, a row of the task registry: its loss, the metric the loop logs, "
        "validates and picks the best weights by, and the model's head")
          .one_of(train::task_choices()).default_for("gpt", "causal_lm").since_results(),
      i("train.loss_chunk_tokens", 0,
        "the output projection and the cross-entropy as one op over chunks of this many tokens, "
        "so the [tokens, vocab] logits are never held whole in training or evaluation (a fused "
        "linear cross-entropy, as Liger Kernel's and torchtune's chunked loss); 0 = the whole "
        "logits, then the loss")
          .at_least(0).kind(IntKind::I64).only({"gpt"}).since_results(),
      s("train.activation_checkpointing", "none",
        "full = keep only each transformer block's input for the backward and run the block "
        "again there (activation checkpointing: torch.utils.checkpoint around every block, "
        "torchtitan's full mode), trading one more forward for the activations' memory; "
        "none = keep every activation")
          .one_of({"none", "full"}).only({"gpt"}).since_results(),
      s("train.test_weights", "last",
        "the weights the test pass uses: last = the last step's (a plain loop); best_val = "
        "those with the best validation accuracy so far (Lightning's ModelCheckpoint(monitor="
        "\"val_acc\", mode=\"max\") with trainer.test(ckpt_path=\"best\")), kept in memory and "
        "in OUT/best.ckpt when checkpoints are saved; the test of the last weights is "
        "recorded too")
          .one_of({"last", "best_val"}),
      i("train.val_every_steps", 0,
        "validate every N training steps as well as at each epoch's end; 0 = at epoch ends "
        "only (validation time counts as training time, as Lightning's does)")
          .at_least(0).kind(IntKind::I64),
      i("train.accumulate", 1,
        "gradient accumulation: batches per optimizer step (ddp/fsdp reduce only on the last, "
        "as Fabric's no_backward_sync)").at_least(1),
      d("train.target", 0.0,
        "time to accuracy: the validation value of the task's metric to reach (an accuracy as a "
        "fraction, reached at or above it; a language model's loss, reached at or below it; the "
        "test split is never used to stop); the run records the steps, samples and time (training and the "
        "validations) at the first validation that reaches it, or that none did. Validations "
        "run at epoch ends and every train.val_every_steps; train.max_steps caps the steps; "
        "0 = no target")
          .at_least(0),
      s("train.target_metric", "val_acc",
        "train.target's measure: val_acc = the task's metric on the validation split (accuracy, or "
        "causal_lm's loss)")
          .one_of({"val_acc"}),
      b("train.stop_at_target", false,
        "end training at the validation that first reaches train.target: the test pass (and "
        "the final checkpoint) then hold the weights that reached it"),
      d("train.inject_delay", 0.0,
        "fault injection, to test a gate: delay every training step by this fraction of its "
        "own time (0.07 = 7% slower) by sleeping inside the timed step, after a device sync; "
        "warned, recorded in result.json, and named by compare, which otherwise treats the "
        "config as unchanged (as a slower build of the same config); 0 = off")
          .at_least(0).at_most(10),

      s("runtime.accelerator", "cpu", "device type (a row of the accelerator registry); auto = the first device this machine has, else cpu")
          .one_of(plan::accelerator_choices()),
      i("runtime.devices", 1, "devices (ranks) per node; above 1, `accel-bench run` starts one "
        "process per device; auto = the visible GPUs on cuda (1 under strategy single), 1 on cpu")
          .at_least(1).at_most(1024).or_word("auto"),
      i("runtime.num_nodes", 1, "nodes; above 1, start each node's ranks with torchrun or srun "
        "(their RANK/WORLD_SIZE/MASTER_ADDR variables are read)").at_least(1).at_most(4096),
      s("runtime.strategy", "auto",
        "parallel strategy (Lightning's names); auto = single on one rank, ddp on several; "
        "deepspeed_stage_2 = ZeRO stage 2 built on c10d (parameters whole on every rank, "
        "gradients reduce-scattered and optimizer state kept in 1/N shards), "
        "deepspeed_stage_1 = ZeRO stage 1 (gradients all-reduced); neither uses DeepSpeed")
          .one_of(dist::strategy_choices()),
      s("runtime.backend", "auto", "process-group backend; auto = nccl on cuda, gloo on cpu")
          .one_of({"auto", "gloo", "nccl"}),
      i("runtime.timeout_s", 180,
        "seconds a rank waits for the others (rendezvous, any collective) before failing")
          .at_least(1).at_most(86400),
      s("runtime.master_addr", "",
        "rank 0's address; \"\" = MASTER_ADDR from the environment, else 127.0.0.1"),
      i("runtime.master_port", 0,
        "rank 0's store port under torchrun/Slurm (one machine's ranks meet in a private "
        "FileStore and listen on no port); 0 = MASTER_PORT from the environment, else a free port")
          .at_least(0).at_most(65535),
      d("runtime.bucket_mb", 25.0, "ddp: gradient bucket size in MiB (PyTorch's default 25)")
          .above(0),
      s("runtime.comm_wait", "auto",
        "how a rank waits for a gloo collective: spin = poll it, yielding the core, for up to "
        "20 ms, then sleep (as MPI libraries do; a sleeping wait pays a wake-up per hop); "
        "block = sleep at once (c10d's wait; kinder to other load on the cores); auto = spin "
        "when the local ranks' threads fit the cores, else block")
          .one_of({"auto", "spin", "block"}),
      s("runtime.fsdp_sharding", "FULL_SHARD",
        "fsdp: FULL_SHARD = ZeRO-3 (params, grads, optimizer state); SHARD_GRAD_OP = ZeRO-2 "
        "(params kept gathered from forward to backward); NO_SHARD = DDP-like")
          .one_of({"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}),
      b("runtime.cuda_graphs", false,
        "capture the whole train step (forward, backward, optimizer) in a CUDA Graph after "
        "3 warm-up steps and replay it (the article's torch.compile rung 02); cuda, one "
        "device, adam or adamw, no grad_clip, accumulate or 16-mixed"),
      b("runtime.fsdp_prefetch", true, "fsdp: all-gather the next unit while this one computes"),
      s("runtime.matmul_precision", "highest",
        "float32 matmul precision, as torch.set_float32_matmul_precision: high and medium "
        "let CUDA use TF32 on Ampere and newer (the article sets medium from rung 05); "
        "recorded in result.json's env")
          .one_of({"highest", "high", "medium"}),
      s("runtime.attention", "auto",
        "softmax attention: auto = the fastest this LibTorch and device have (SDPA on 2.x, "
        "accel-bench's fused CPU kernel on 1.13); explicit = matmul, softmax, matmul with the "
        "mask made (the eager form a plain PyTorch model runs); recorded in result.json's env")
          .one_of({"auto", "explicit"}).since_results(),
      precision_field(s("runtime.precision", "32-true", "numeric precision (Lightning names)")),
      i("runtime.threads", 0,
        "intra-op threads; 0 = cores per local rank (at most 4 per core: more only slow a step)")
          .at_least(0).at_most(4096),
  };
}

// Number as written in ranges: 1 rather than 1.000000.
std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Optimal string alignment distance: like Levenshtein, but a swap of two
// neighbouring letters ("trian") counts as one edit. Case-insensitive.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  auto eq = [](char x, char y) { return std::tolower(x) == std::tolower(y); };
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = eq(a[i - 1], b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && eq(a[i - 1], b[j - 2]) && eq(a[i - 2], b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string type_name(const Field& f) {
  switch (f.type) {
    case Type::Int: return f.int_kind == IntKind::U64 ? "uint64" : "int";
    case Type::Float: return "float";
    case Type::Bool: return "bool";
    case Type::String: return "string";
    case Type::IntList: return "int list";
  }
  return "?";
}

// "; vit only" / "; default 0.1 for bert" notes of an explain line.
std::string tag_note(const Field& f) {
  std::string note;
  if (!f.tags.empty()) note += "; only for " + join(f.tags, ", ");
  for (const auto& [tag, v] : f.tag_defaults) note += "; default " + v.dump() + " for " + tag;
  return note;
}

// The trailing "(one of ...)" / "(range ...)" note of an explain line.
std::string constraint_note(const Field& f) {
  if (!f.choices.empty()) {
    std::string note = "one of: " + join(f.choices, ", ");
    if (!f.aliases.empty()) {
      std::vector<std::string> a;
      for (const auto& [from, to] : f.aliases) a.push_back(from + "=" + to);
      note += "; aliases: " + join(a, ", ");
    }
    return note;
  }
  std::string r = range_text(f);
  for (const auto& w : f.words) r += " or \"" + w + "\"";
  if (r.empty()) return "";
  if (f.type == Type::IntList) r = "entries " + r;
  if (f.unique) r += ", no duplicates";
  return r;
}

}  // namespace

const std::vector<Field>& schema() {
  static const std::vector<Field> table = build_table();
  return table;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = {"model", "data", "optim", "train", "runtime"};
  return s;
}

const std::vector<std::string>& top_level_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"extends"};
    for (const auto& f : schema())
      if (f.section.empty()) k.push_back(f.key);
    k.insert(k.end(), sections().begin(), sections().end());
    return k;
  }();
  return keys;
}

bool applies(const Field& f, const Active& active) {
  if (f.tags.empty()) return true;
  return std::any_of(f.tags.begin(), f.tags.end(), [&](const std::string& t) { return active.has(t); });
}

nlohmann::json default_of(const Field& f, const Active& active) {
  for (const auto& [tag, v] : f.tag_defaults)
    if (active.has(tag)) return v;
  return f.def;
}

const Field* find_field(const std::string& path) {
  for (const auto& f : schema())
    if (f.path == path) return &f;
  return nullptr;
}

std::vector<std::string> keys_of(const std::string& section) {
  std::vector<std::string> keys;
  for (const auto& f : schema())
    if (f.section == section) keys.push_back(f.key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::string range_text(const Field& f) {
  if (f.min && f.max)
    return "in " + std::string(f.min_open ? "(" : "[") + num(*f.min) + ", " +
           num(*f.max) + (f.max_open ? ")" : "]");
  if (f.min) return (f.min_open ? "> " : ">= ") + num(*f.min);
  if (f.max) return (f.max_open ? "< " : "<= ") + num(*f.max);
  return "";
}

std::string expectation(const Field& f) {
  std::string what;
  switch (f.type) {
    case Type::Int: what = "an integer"; break;
    case Type::Float: what = "a number"; break;
    case Type::Bool: return "expected true or false";
    case Type::String: return "expected a string";
    case Type::IntList: what = "a list of integers"; break;
  }
  std::string r = range_text(f);
  return "expected " + what + (r.empty() ? "" : " " + r);
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  // An obvious typo: at most 2 edits, and fewer edits than half the word, so
  // short unrelated words are not "corrected" into each other.
  std::string best;
  size_t best_d = 3;
  for (const auto& c : candidates) {
    size_t dist = edit_distance(word, c);
    if (dist < best_d && dist * 2 < std::max(word.size(), c.size())) {
      best = c;
      best_d = dist;
    }
  }
  return best;
}

std::string show(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) out += (k ? sep : "") + items[k];
  return out;
}

std::string prefix(const Origins& origins, const std::string& path) {
  auto it = origins.find(path);
  return it == origins.end() || it->second.empty() ? "" : it->second + ": ";
}

}  // namespace accel::config::detail

namespace accel::config {

std::string explain_schema() {
  using namespace detail;
  struct Row { std::string path, type, def, doc; };
  std::vector<Row> rows = {{"extends", "string", "-",
                            "parent config, relative to this file; child keys win"}};
  for (const auto& f : schema()) {
    std::string note = constraint_note(f);
    rows.push_back({f.path, type_name(f), f.def.dump(),
                    f.doc + (note.empty() ? "" : "  (" + note + ")") + tag_note(f)});
  }
  size_t wp = 0, wt = 0, wd = 0;
  for (const auto& r : rows) {
    wp = std::max(wp, r.path.size());
    wt = std::max(wt, r.type.size());
    wd = std::max(wd, r.def.size());
  }
  auto pad = [](const std::string& s, size_t w) { return s + std::string(w - s.size(), ' '); };
  std::string out = pad("PATH", wp) + "  " + pad("TYPE", wt) + "  " + pad("DEFAULT", wd) +
                    "  DOC\n";
  for (const auto& r : rows)
    out += pad(r.path, wp) + "  " + pad(r.type, wt) + "  " + pad(r.def, wd) + "  " + r.doc + "\n";
  return out;
}

}  // namespace accel::config
