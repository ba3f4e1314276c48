// Resolved JSON -> RunConfig. The document is validated again first (cheap,
// idempotent on resolved documents) so a hand-built or partial document gets
// defaults and a ConfigError rather than a json exception.
#include <cstdio>

#include "accel/config/run_config.h"
#include "accel/util/errors.h"
#include "accel/util/hash.h"
#include "schema.h"

namespace accel::config {
namespace {

using nlohmann::json;

// A field the resolved document may leave out (one that does not apply to
// its model family or data kind): the struct keeps its default then.
template <typename T>
void take(const json& section, const char* key, T& field) {
  auto it = section.find(key);
  if (it != section.end() && !it->is_null()) field = it->get<T>();
}

ModelConfig model_of(const json& m) {
  ModelConfig c;
  c.arch = m["arch"].get<std::string>();
  c.preset = m["preset"].get<std::string>();
  take(m, "image_size", c.image_size);
  take(m, "in_channels", c.in_channels);
  take(m, "patch_size", c.patch_size);
  take(m, "dim", c.dim);
  take(m, "depth", c.depth);
  c.heads = m["heads"].get<int>();
  take(m, "mlp_dim", c.mlp_dim);
  take(m, "vocab_size", c.vocab_size);
  take(m, "max_positions", c.max_positions);
  take(m, "type_vocab_size", c.type_vocab_size);
  take(m, "hidden", c.hidden);
  take(m, "layers", c.layers);
  take(m, "intermediate", c.intermediate);
  take(m, "kv_heads", c.kv_heads);
  take(m, "classifier_dropout", c.classifier_dropout);
  c.num_classes = m["num_classes"].get<int>();
  c.dropout = m["dropout"].get<double>();
  c.attention_dropout = m["attention_dropout"].get<double>();
  c.init = m["init"].get<std::string>();
  c.init_path = m["init_path"].get<std::string>();
  c.init_strict = m["init_strict"].get<bool>();
  c.init_head = m["init_head"].get<std::string>();
  c.init_format = m["init_format"].get<std::string>();
  return c;
}

DataConfig data_of(const json& d) {
  DataConfig c;
  c.dataset = d["dataset"].get<std::string>();
  c.root = d["root"].get<std::string>();
  c.classes = d["classes"].get<std::vector<int>>();
  c.train_subset = d["train_subset"].get<int64_t>();
  c.val_fraction = d["val_fraction"].get<double>();
  take(d, "resize", c.resize);
  take(d, "normalize", c.normalize);
  c.synthetic_train = d["synthetic_train"].get<int64_t>();
  c.synthetic_test = d["synthetic_test"].get<int64_t>();
  c.prefetch = d["prefetch"].get<int>();
  take(d, "vocab", c.vocab);
  take(d, "max_length", c.max_length);
  take(d, "padding", c.padding);
  take(d, "packing", c.packing);
  take(d, "lowercase", c.lowercase);
  take(d, "tokenizer", c.tokenizer);
  take(d, "test_fraction", c.test_fraction);
  take(d, "split_seed", c.split_seed);
  take(d, "train_file", c.train_file);
  take(d, "test_file", c.test_file);
  take(d, "text_column", c.text_column);
  take(d, "label_column", c.label_column);
  return c;
}

OptimConfig optim_of(const json& o) {
  OptimConfig c;
  c.name = o["name"].get<std::string>();
  c.lr = o["lr"].get<double>();
  c.weight_decay = o["weight_decay"].get<double>();
  c.momentum = o["momentum"].get<double>();
  c.implementation = o["implementation"].get<std::string>();
  c.beta1 = o["beta1"].get<double>();
  c.beta2 = o["beta2"].get<double>();
  c.eps = o["eps"].get<double>();
  c.scheduler = o["scheduler"].get<std::string>();
  c.warmup_steps = o["warmup_steps"].get<int64_t>();
  c.min_lr = o["min_lr"].get<double>();
  return c;
}

TrainConfig train_of(const json& t) {
  TrainConfig c;
  c.epochs = t["epochs"].get<int>();
  c.batch_size = t["batch_size"].get<int>();
  c.eval_batch_size = t["eval_batch_size"].get<int>();
  c.seed = t["seed"].get<uint64_t>();
  c.log_every = t["log_every"].get<int>();
  c.limit_train_batches = t["limit_train_batches"].get<int64_t>();
  c.limit_eval_batches = t["limit_eval_batches"].get<int64_t>();
  c.warmup_steps = t["warmup_steps"].get<int>();
  c.loop = t["loop"].get<std::string>();
  c.grad_clip = t["grad_clip"].get<double>();
  c.max_steps = t["max_steps"].get<int64_t>();
  c.checkpoint_every = t["checkpoint_every"].get<int64_t>();
  c.save_checkpoint = t["save_checkpoint"].get<bool>();
  c.test_weights = t["test_weights"].get<std::string>();
  c.task = t["task"].get<std::string>();
  take(t, "loss_chunk_tokens", c.loss_chunk_tokens);
  take(t, "activation_checkpointing", c.activation_checkpointing);
  c.val_every_steps = t["val_every_steps"].get<int64_t>();
  c.accumulate = t["accumulate"].get<int>();
  c.inject_delay = t["inject_delay"].get<double>();
  c.target = t["target"].get<double>();
  c.target_metric = t["target_metric"].get<std::string>();
  c.stop_at_target = t["stop_at_target"].get<bool>();
  return c;
}

RuntimeConfig runtime_of(const json& r) {
  RuntimeConfig c;
  c.accelerator = r["accelerator"].get<std::string>();
  c.devices = r["devices"].is_string() ? 0 : r["devices"].get<int>();  // 0: "auto"
  c.num_nodes = r["num_nodes"].get<int>();
  c.strategy = r["strategy"].get<std::string>();
  c.precision = r["precision"].get<std::string>();
  c.threads = r["threads"].get<int>();
  c.backend = r["backend"].get<std::string>();
  c.timeout_s = r["timeout_s"].get<int>();
  c.master_addr = r["master_addr"].get<std::string>();
  c.master_port = r["master_port"].get<int>();
  c.bucket_mb = r["bucket_mb"].get<double>();
  c.comm_wait = r["comm_wait"].get<std::string>();
  c.fsdp_sharding = r["fsdp_sharding"].get<std::string>();
  c.fsdp_prefetch = r["fsdp_prefetch"].get<bool>();
  c.matmul_precision = r["matmul_precision"].get<std::string>();
  take(r, "attention", c.attention);
  c.cuda_graphs = r["cuda_graphs"].get<bool>();
  return c;
}

}  // namespace

RunConfig to_run_config(const nlohmann::json& resolved) {
  if (resolved.is_object() && resolved.contains("extends"))
    throw ConfigError("extends: the document still has an extends key; "
                      "resolve it with load_config or resolve_config first");
  const json& doc = resolved.is_null() ? json::object() : resolved;
  detail::check_keys(doc, "");
  const json r = detail::validate(doc, {});
  RunConfig c;
  c.name = r["name"].get<std::string>();
  c.description = r["description"].get<std::string>();
  c.model = model_of(r["model"]);
  c.data = data_of(r["data"]);
  c.optim = optim_of(r["optim"]);
  c.train = train_of(r["train"]);
  c.runtime = runtime_of(r["runtime"]);
  return c;
}

std::string config_hash(const nlohmann::json& resolved) { return util::fnv1a_hex(resolved.dump()); }

void drop_added_defaults(nlohmann::json& config) {
  for (const auto& f : detail::schema()) {
    if (!f.added_later || !config.is_object() || !config.contains(f.section)) continue;
    auto& section = config[f.section];
    if (section.is_object() && section.contains(f.key) && section[f.key] == f.def) section.erase(f.key);
  }
}

}  // namespace accel::config
