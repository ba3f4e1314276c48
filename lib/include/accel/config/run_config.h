// The run configuration: a JSON document with sections model, data, optim,
// train and runtime. The schema (field, type, default, one-line doc, range or
// choices) lives in one table in config/schema.cpp; loading, validation and
// `accel-bench config --explain` are all driven by that table.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "accel/util/json.h"

namespace accel::config {

// Fields a model family or kind of data does not read are left at these
// defaults (the resolved JSON leaves them out; config/schema.cpp tags them).
struct ModelConfig {
  std::string arch = "vit";                // model family (accel/models/family.h)
  std::string preset = "vit_tiny_fmnist";  // one of the family's presets, or custom
  // Architecture; 0 means "take it from the preset" (the family resolves it).
  int image_size = 0;
  int in_channels = 0;
  int patch_size = 0;
  int dim = 0;
  int depth = 0;
  int heads = 0;
  int mlp_dim = 0;
  // Text families (bert, distilbert): 0 = the preset's.
  int64_t vocab_size = 0;
  int64_t max_positions = 0;
  int64_t type_vocab_size = 0;  // bert
  int hidden = 0;
  int layers = 0;
  int intermediate = 0;
  int kv_heads = 0;  // gpt: key-value heads
  int num_classes = 0;      // 0 in JSON: number of classes the data yields
  double dropout = 0.0;
  double attention_dropout = 0.0;
  double classifier_dropout = 0.1;  // text families: before the classifier
  std::string init = "random";     // random | checkpoint | safetensors
  std::string init_path;           // for checkpoint / safetensors
  bool init_strict = true;
  std::string init_head = "auto";  // auto | replace
  std::string init_format = "auto";  // safetensors names: auto or one of the family's formats
};

struct DataConfig {
  std::string dataset = "fashion-mnist";  // a row of the dataset table (accel/data/catalog.h)
  std::string root;                       // "" = the dataset's default location
  std::vector<int> classes;               // empty = all; remapped to 0..n-1
  int64_t train_subset = 0;               // 0 = all; seeded, balanced per class
  double val_fraction = 0.1;              // last fraction of train, as cvpr2023
  int resize = 0;                         // 0 = the model's image size; else must equal it
  bool normalize = true;                  // per-dataset mean/std
  int64_t synthetic_train = 1024;         // synthetic dataset sizes
  int64_t synthetic_test = 256;
  int prefetch = 2;                       // batches prepared ahead of training
  // Text datasets.
  std::string vocab;                      // WordPiece vocab.txt; "" = the installed MiniLM vocab
  std::string tokenizer = "wordpiece";    // a row of text/tokenizers.h
  int64_t max_length = 128;               // tokens per text with [CLS] and [SEP]
  std::string padding = "longest";        // longest (per batch) | max_length (fixed)
  std::string packing = "packed";         // token streams: packed windows | documents (padded)
  bool lowercase = true;                  // uncased WordPiece (accents stripped)
  double test_fraction = 0.2;             // pooled datasets: share held out for test
  uint64_t split_seed = 123;              // pooled datasets: the split's shuffle
  std::string train_file, test_file;      // text-csv
  std::string text_column = "text", label_column = "label";  // text-csv
};

struct OptimConfig {
  std::string name = "adam";  // adam | adamw | sgd
  double lr = 5e-5;
  double weight_decay = 0.0;
  double momentum = 0.9;      // sgd only
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  std::string implementation = "fused";  // fused | torch (adam/adamw on CPU float32)
  std::string scheduler = "none";  // none | cosine
  int64_t warmup_steps = 0;        // cosine: linear warm-up steps
  double min_lr = 0.0;             // cosine: final learning rate
};

struct TrainConfig {
  int epochs = 10;
  int batch_size = 16;
  int eval_batch_size = 0;          // 0 = batch_size
  uint64_t seed = 123;
  int log_every = 300;
  int64_t limit_train_batches = 0;  // 0 = all
  int64_t limit_eval_batches = 0;   // 0 = all
  int warmup_steps = 5;             // steps excluded from step-time statistics
  std::string loop = "plain";       // plain | fabric
  double grad_clip = 0.0;           // 0 = off
  int64_t max_steps = 0;            // 0 = no limit
  int64_t checkpoint_every = 0;     // 0 = final checkpoint only
  bool save_checkpoint = true;
  int accumulate = 1;               // batches per optimizer step
  std::string test_weights = "last";  // last | best_val: the weights the test pass uses
  std::string task = "classification";  // a row of the task registry (accel/train/task.h)
  int64_t loss_chunk_tokens = 0;    // the model computes its loss in chunks of this many tokens; 0 = from whole logits
  std::string activation_checkpointing = "none";  // none | full: every block run again in the backward
  int64_t val_every_steps = 0;      // validate every N steps too; 0 = at each epoch's end only
  double inject_delay = 0.0;        // fault injection: each step slowed by this fraction; 0 = off
  double target = 0.0;              // validation accuracy to reach; 0 = none
  std::string target_metric = "val_acc";
  bool stop_at_target = false;      // end training when the target is reached
};

struct RuntimeConfig {
  std::string accelerator = "cpu";   // cpu | cuda | auto
  int devices = 1;                   // 0 = "auto": train::resolve_devices before launch
  int num_nodes = 1;
  std::string strategy = "auto";     // auto | single | ddp | fsdp | deepspeed_stage_1|2
  std::string precision = "32-true"; // Lightning names; aliases resolved
  int threads = 0;                   // 0 = cores available per local rank
  std::string backend = "auto";      // auto | gloo | nccl
  int timeout_s = 180;               // rendezvous and collectives
  std::string master_addr;           // "" = MASTER_ADDR or 127.0.0.1
  int master_port = 0;               // 0 = MASTER_PORT or a free port
  double bucket_mb = 25.0;           // ddp
  std::string comm_wait = "auto";    // auto | spin | block: how a rank waits for a gloo collective
  std::string fsdp_sharding = "FULL_SHARD";
  bool fsdp_prefetch = true;
  std::string matmul_precision = "highest";  // highest | high | medium
  std::string attention = "auto";            // auto | explicit (models::AttentionImpl)
  bool cuda_graphs = false;          // capture and replay the whole train step
  // An unresolved "auto" counts as one device per node.
  int world_size() const { return (devices > 0 ? devices : 1) * num_nodes; }
};

struct RunConfig {
  std::string name;
  std::string description;
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  TrainConfig train;
  RuntimeConfig runtime;
};

// Reads FILE, follows its "extends" chain (paths relative to the including
// file, cycles rejected), applies `--set section.key=value` assignments in
// order, fills defaults, normalises aliases and validates every field.
// Returns the resolved JSON (every field present, no "extends").
// Throws accel::ConfigError with a one-line message naming the file and the
// JSON path on any problem (malformed JSON with line and column, unknown key
// with the list of valid keys, wrong type, out-of-range value, missing file).
nlohmann::json load_config(const std::filesystem::path& file,
                           const std::vector<std::string>& sets = {});

// Removes from a resolved config the fields the schema added after results
// were first recorded where they hold their default (what every run before
// them did): a config hash stored then still matches a run that records them.
void drop_added_defaults(nlohmann::json& config);

// Same, from an in-memory document (its "extends" resolved against base_dir).
nlohmann::json resolve_config(const nlohmann::json& doc,
                              const std::filesystem::path& base_dir,
                              const std::vector<std::string>& sets = {});

// Converts a resolved document into the typed struct.
RunConfig to_run_config(const nlohmann::json& resolved);

// One line per field: path, type, default, doc (what `config --explain` prints).
std::string explain_schema();

// A short hash of a resolved config (FNV-1a 64 of its compact dump, 16 hex
// digits): what every rank compares at rendezvous, the sweep records per run
// (sweep.json "config_hash") and compares to reuse a run. The one hash of a
// config.
std::string config_hash(const nlohmann::json& resolved);

}  // namespace accel::config
