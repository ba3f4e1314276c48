// Checkpoint file: envelope (magic, version, length, CRC-32) around a
// torch::serialize archive. Archive keys:
//   meta, progress, grad_scaler, config   JSON documents as strings
//   model/size, model/name/I, model/tensor/I   parameters then buffers, CPU
//   optimizer                              torch::optim::Optimizer::save
//   rng/cpu, rng/KIND/size, rng/KIND/I     generator states (uint8 tensors), each
//                                          device accelerator's (cuda) by kind
#include "accel/train/checkpoint.h"

#include <zlib.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <type_traits>

#include "accel/build_info.h"
#include "accel/metrics/metrics.h"
#include "accel/models/family.h"
#include "accel/models/safetensors.h"
#include "accel/plan/accelerator.h"
#include "accel/train/device_runtime.h"
#include "accel/util/errors.h"
#include "accel/util/input_file.h"
#include "accel/util/json_doc.h"
#include "accel/util/torch_compat.h"

namespace accel::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kMagic[8] = {'A', 'C', 'C', 'E', 'L', 'C', 'K', 'P'};
constexpr uint64_t kHeaderBytes = 24;  // magic, version, reserved, payload length
constexpr uint64_t kEnvelopeBytes = kHeaderBytes + 4;

// Optimizer::save names each parameter's state by its TensorImpl address: 1.x
// as "0x..." (state keyed by string), 2.x in decimal (state keyed by void*,
// saved names parsed with std::stoull, which misreads 1.x names as 0).
constexpr bool kDecimalStateKeys =
    !std::is_same_v<typename compat::OptimizerStateMap::key_type, std::string>;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint32_t crc32_of(const std::string& data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < data.size()) {
    const size_t n = std::min<size_t>(data.size() - done, size_t{1} << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

// First line of a torch error, without the C++ backtrace.
std::string brief(const std::exception& e) {
  std::string msg = e.what();
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) msg = c10e->what_without_backtrace();
  const auto nl = msg.find('\n');
  return nl == std::string::npos ? msg : msg.substr(0, nl);
}

std::string shape_str(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

std::string optimizer_kind(const torch::optim::Optimizer& opt) {
  if (dynamic_cast<const torch::optim::AdamW*>(&opt)) return "adamw";
  if (dynamic_cast<const torch::optim::Adam*>(&opt)) return "adam";
  if (dynamic_cast<const torch::optim::SGD*>(&opt)) return "sgd";
  if (dynamic_cast<const torch::optim::RMSprop*>(&opt)) return "rmsprop";
  if (dynamic_cast<const torch::optim::Adagrad*>(&opt)) return "adagrad";
  if (dynamic_cast<const torch::optim::LBFGS*>(&opt)) return "lbfgs";
  return "other";
}

json optimizer_shapes(const torch::optim::Optimizer& opt) {
  json groups = json::array();
  for (const auto& group : opt.param_groups()) {
    json shapes = json::array();
    for (const auto& p : group.params()) shapes.push_back(p.sizes().vec());
    groups.push_back(shapes);
  }
  return groups;
}

void write_json(torch::serialize::OutputArchive& ar, const std::string& key, const json& doc) {
  ar.write(key, c10::IValue(doc.dump()));
}
json read_json(torch::serialize::InputArchive& ar, const std::string& key, const fs::path& file) {
  c10::IValue v;
  ar.read(key, v);
  return parse_json_text(v.toStringRef(), file.string() + ": " + key);
}

[[noreturn]] void bad(const fs::path& file, const std::string& what) {
  throw ConfigError(file.string() + ": " + what);
}

// Same optimizer type, parameter groups and shapes as the saved one, and state
// keys this LibTorch can map.
void check_optimizer(const Checkpoint& ckpt, const torch::optim::Optimizer& optimizer) {
  const std::string kind = optimizer_kind(optimizer);
  const std::string saved_kind = ckpt.meta.value("optimizer", std::string("?"));
  if (kind != saved_kind) {
    bad(ckpt.file, "checkpoint holds " + saved_kind + " optimizer state, this run uses " + kind);
  }
  const json here = optimizer_shapes(optimizer);
  const json saved = ckpt.meta.value("optimizer_param_shapes", json::array());
  const std::string differ = "optimizer parameters differ from the checkpoint's: ";
  if (saved.size() != here.size()) {
    bad(ckpt.file, differ + std::to_string(saved.size()) + " parameter groups in the checkpoint, " +
                       std::to_string(here.size()) + " here");
  }
  for (size_t g = 0; g < here.size(); ++g) {
    const std::string group = "group " + std::to_string(g) + " ";
    if (saved[g].size() != here[g].size()) {
      bad(ckpt.file, differ + group + "has " + std::to_string(saved[g].size()) +
                         " parameters in the checkpoint, " + std::to_string(here[g].size()) + " here");
    }
    for (size_t i = 0; i < here[g].size(); ++i) {
      if (saved[g][i] != here[g][i]) {
        bad(ckpt.file, differ + group + "parameter " + std::to_string(i) + " is " +
                           saved[g][i].dump() + " in the checkpoint, " + here[g][i].dump() + " here");
      }
    }
  }
  if (kDecimalStateKeys && ckpt.hex_state_keys_) {
    bad(ckpt.file, "optimizer state written by LibTorch " +
                       ckpt.meta.value("torch_version", std::string("?")) +
                       " cannot be restored by LibTorch " TORCH_VERSION
                       " (model tensors can: use model.init)");
  }
}

}  // namespace

json progress_to_json(const TrainProgress& p) {
  return {{"epoch", p.epoch},
          {"step", p.step},
          {"batch_in_epoch", p.batch_in_epoch},
          {"extra", p.extra}};
}

TrainProgress progress_from_json(const json& doc, const std::string& source) {
  TrainProgress p;
  auto field = [&](const char* key) -> const json& {
    if (!doc.is_object() || !doc.contains(key) || !doc.at(key).is_number_integer()) {
      throw ConfigError(source + ": checkpoint progress." + key + " missing or not an integer");
    }
    return doc.at(key);
  };
  p.epoch = field("epoch").get<int>();
  p.step = field("step").get<int64_t>();
  p.batch_in_epoch = field("batch_in_epoch").get<int64_t>();
  if (doc.contains("extra")) p.extra = doc.at("extra");
  return p;
}

void save_checkpoint(const fs::path& file, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const json& grad_scaler_state,
                     const TrainProgress& progress, const json& resolved_config,
                     bool overwrite) {
  if (!overwrite && fs::exists(file)) {
    throw ConfigError(file.string() + ": checkpoint exists; pass --force/overwrite");
  }
  std::string payload;
  try {
    torch::serialize::OutputArchive ar;
    torch::serialize::OutputArchive model_ar(ar.compilation_unit());
    int64_t count = 0;
    auto put_tensor = [&](const std::string& name, const torch::Tensor& t) {
      model_ar.write("name/" + std::to_string(count), c10::IValue(name));
      model_ar.write("tensor/" + std::to_string(count), t.detach().to(torch::kCPU),
                     /*is_buffer=*/true);
      ++count;
    };
    for (const auto& item : model.named_parameters(/*recurse=*/true)) put_tensor(item.key(), item.value());
    for (const auto& item : model.named_buffers(/*recurse=*/true)) put_tensor(item.key(), item.value());
    model_ar.write("size", c10::IValue(count));
    ar.write("model", model_ar);

    torch::serialize::OutputArchive optim_ar(ar.compilation_unit());
    optimizer.save(optim_ar);
    ar.write("optimizer", optim_ar);

    torch::serialize::OutputArchive rng_ar(ar.compilation_unit());
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng_ar.write("cpu", gen.get_state(), /*is_buffer=*/true);
    }
    // Each accelerator's device generators, "<kind>/size" and "<kind>/I"
    // ("cuda/size" 0 where there is none, as every checkpoint has had).
    json device_rng_counts = json::object();
    for (const auto& row : plan::accelerator_catalog()) {
      if (row.host) continue;
      const auto* rt = find_device_runtime(row.kind);
      const int64_t n = rt == nullptr ? 0 : static_cast<int64_t>(rt->device_count());
      for (int64_t i = 0; i < n; ++i) {
        at::Generator gen = at::globalContext().defaultGenerator(
            c10::Device(rt->type(), static_cast<c10::DeviceIndex>(i)));
        std::lock_guard<std::mutex> lock(gen.mutex());
        rng_ar.write(row.kind + "/" + std::to_string(i), gen.get_state(), /*is_buffer=*/true);
      }
      rng_ar.write(row.kind + "/size", c10::IValue(n));
      device_rng_counts[row.kind + "_rng_states"] = n;
    }
    ar.write("rng", rng_ar);

    const json meta = {{"format_version", kCheckpointFormatVersion},
                       {"accel_version", ACCEL_VERSION},
                       {"git_sha", ACCEL_GIT_SHA},
                       {"torch_version", TORCH_VERSION},
                       {"optimizer", optimizer_kind(optimizer)},
                       {"optimizer_param_shapes", optimizer_shapes(optimizer)},
                       {"model_tensors", count}};
    json meta_all = meta;
    meta_all.update(device_rng_counts);
    write_json(ar, "meta", meta_all);
    write_json(ar, "progress", progress_to_json(progress));
    write_json(ar, "grad_scaler", grad_scaler_state);
    write_json(ar, "config", resolved_config);

    ar.save_to([&payload](const void* data, size_t size) -> size_t {
      payload.append(static_cast<const char*>(data), size);
      return size;
    });
  } catch (const json::exception& e) {
    throw RunError(file.string() + ": cannot serialize checkpoint JSON: " + e.what());
  } catch (const c10::Error& e) {
    throw RunError(file.string() + ": cannot serialize checkpoint: " + brief(e));
  }

  std::string header(kMagic, sizeof(kMagic));
  put_le(header, kCheckpointFormatVersion, 4);
  put_le(header, 0, 4);  // reserved
  put_le(header, payload.size(), 8);
  std::string trailer;
  put_le(trailer, crc32_of(payload), 4);

  std::error_code ec;
  if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
  // The one atomic-write helper (temp file, fsync, link or rename, folder fsync).
  if (!metrics::write_bytes_atomic(file, {header, payload, trailer},
                                   overwrite ? metrics::IfExists::Replace
                                             : metrics::IfExists::Keep)) {
    throw ConfigError(file.string() + ": checkpoint exists; pass --force/overwrite");
  }
}

Checkpoint read_checkpoint(const fs::path& file) {
  std::error_code ec;
  const auto status = fs::status(file, ec);
  if (!fs::exists(status)) bad(file, "checkpoint not found");
  if (!fs::is_regular_file(status)) bad(file, "checkpoint is not a regular file");
  const uint64_t size = fs::file_size(file, ec);
  if (ec) bad(file, "cannot read checkpoint: " + ec.message());
  std::ifstream in(file, std::ios::binary);
  if (!in) bad(file, "cannot open checkpoint for reading");

  char header[kHeaderBytes];
  const uint64_t head = std::min<uint64_t>(size, kHeaderBytes);
  in.read(header, static_cast<std::streamsize>(head));
  if (static_cast<uint64_t>(in.gcount()) != head) bad(file, "cannot read checkpoint header");
  if (std::memcmp(header, kMagic, std::min<uint64_t>(head, sizeof(kMagic))) != 0) {
    bad(file, "not an accel-bench checkpoint (bad magic)");
  }
  if (size < kHeaderBytes) {
    bad(file, "truncated checkpoint: expected at least " + std::to_string(kEnvelopeBytes) +
                  " bytes, found " + std::to_string(size));
  }
  const auto version = static_cast<uint32_t>(get_le(header + 8, 4));
  if (version == 0 || version > kCheckpointFormatVersion) {
    bad(file, "unsupported checkpoint format version " + std::to_string(version) +
                  " (this accel-bench reads up to " + std::to_string(kCheckpointFormatVersion) + ")");
  }
  const uint64_t length = get_le(header + 16, 8);
  if (length > UINT64_MAX - kEnvelopeBytes) bad(file, "corrupt checkpoint (bad payload length)");
  const uint64_t expected = kEnvelopeBytes + length;
  if (size < expected) {
    bad(file, "truncated checkpoint: expected " + std::to_string(expected) + " bytes, found " +
                  std::to_string(size));
  }
  if (size > expected) {
    bad(file, "corrupt checkpoint: expected " + std::to_string(expected) + " bytes, found " +
                  std::to_string(size));
  }
  auto payload = std::make_shared<std::string>();
  payload->resize(length);
  char trailer[4];
  in.read(payload->data(), static_cast<std::streamsize>(length));
  in.read(trailer, 4);
  if (!in) bad(file, "cannot read checkpoint payload");
  if (crc32_of(*payload) != static_cast<uint32_t>(get_le(trailer, 4))) {
    bad(file, "corrupt checkpoint (CRC mismatch)");
  }

  Checkpoint ckpt;
  ckpt.file = file;
  ckpt.payload_ = payload;
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(payload->data(), payload->size(), torch::Device(torch::kCPU));
    ckpt.meta = read_json(ar, "meta", file);
    ckpt.progress = progress_from_json(read_json(ar, "progress", file), file.string());
    ckpt.grad_scaler = read_json(ar, "grad_scaler", file);
    ckpt.config = read_json(ar, "config", file);

    torch::serialize::InputArchive model_ar;
    ar.read("model", model_ar);
    c10::IValue v;
    model_ar.read("size", v);
    for (int64_t i = 0, n = v.toInt(); i < n; ++i) {
      c10::IValue name;
      torch::Tensor t;
      model_ar.read("name/" + std::to_string(i), name);
      model_ar.read("tensor/" + std::to_string(i), t, /*is_buffer=*/true);
      ckpt.tensors_[name.toStringRef()] = t;
    }

    torch::serialize::InputArchive rng_ar;
    ar.read("rng", rng_ar);
    rng_ar.read("cpu", ckpt.cpu_rng_, /*is_buffer=*/true);
    for (const auto& row : plan::accelerator_catalog()) {
      if (row.host || !rng_ar.try_read(row.kind + "/size", v)) continue;
      auto& states = ckpt.device_rng_[row.kind];
      for (int64_t i = 0, n = v.toInt(); i < n; ++i) {
        torch::Tensor t;
        rng_ar.read(row.kind + "/" + std::to_string(i), t, /*is_buffer=*/true);
        states.push_back(t);
      }
    }

    torch::serialize::InputArchive optim_ar, groups_ar, group_ar;
    c10::IValue key;
    if (ar.try_read("optimizer", optim_ar) && optim_ar.try_read("param_groups", groups_ar) &&
        groups_ar.try_read("param_groups/0", group_ar) && group_ar.try_read("params/0", key) &&
        key.isString()) {
      ckpt.hex_state_keys_ = key.toStringRef().rfind("0x", 0) == 0;
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    bad(file, "cannot parse checkpoint payload: " + brief(e));
  }
  return ckpt;
}

void Checkpoint::restore_optimizer(torch::optim::Optimizer& optimizer) const {
  check_optimizer(*this, optimizer);
  torch::Device device(torch::kCPU);
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) {
      device = group.params().front().device();
      break;
    }
  }
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(payload_->data(), payload_->size(), device);
    torch::serialize::InputArchive optim_ar, groups_ar;
    ar.read("optimizer", optim_ar);
    optim_ar.read("param_groups", groups_ar);
    const auto& groups = optimizer.param_groups();
    optimizer.state().clear();
    optimizer.load(optim_ar);
    // LibTorch 1.x loads only the state: restore lr, betas, ... as well.
    for (size_t i = 0; i < groups.size(); ++i) {
      torch::serialize::InputArchive group_ar, options_ar;
      groups_ar.read("param_groups/" + std::to_string(i), group_ar);
      group_ar.read("options", options_ar);
      optimizer.param_groups()[i].options().serialize(options_ar);
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    bad(file, "cannot restore optimizer state: " + brief(e));
  }
}

void Checkpoint::restore_rng() const {
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(cpu_rng_);
  }
  for (const auto& [kind, states] : device_rng_) {
    const auto* rt = find_device_runtime(kind);
    if (rt == nullptr || states.empty()) continue;
    const auto n = std::min<int64_t>(static_cast<int64_t>(states.size()), rt->device_count());
    for (int64_t i = 0; i < n; ++i) {
      at::Generator gen = at::globalContext().defaultGenerator(
          c10::Device(rt->type(), static_cast<c10::DeviceIndex>(i)));
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(states[static_cast<size_t>(i)]);
    }
  }
}

void restore_for_resume(const Checkpoint& ckpt, torch::nn::Module& model,
                        torch::optim::Optimizer& optimizer) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (model, checkpoint)
  std::set<std::string> seen;
  auto match = [&](const std::string& name, const torch::Tensor& dst) {
    const auto it = ckpt.tensors_.find(name);
    if (it == ckpt.tensors_.end()) {
      bad(ckpt.file, "cannot resume: model tensor '" + name + "' is not in the checkpoint");
    }
    const auto& src = it->second;
    if (src.sizes() != dst.sizes() || src.scalar_type() != dst.scalar_type()) {
      bad(ckpt.file, "cannot resume: tensor '" + name + "' is " + shape_str(src) +
                         " in the checkpoint, " + shape_str(dst) + " in the model");
    }
    seen.insert(name);
    copies.emplace_back(dst, src);
  };
  for (const auto& item : model.named_parameters(/*recurse=*/true)) match(item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true)) match(item.key(), item.value());
  for (const auto& item : ckpt.tensors_) {
    if (!seen.count(item.first)) {
      bad(ckpt.file, "cannot resume: checkpoint tensor '" + item.first + "' is not in the model");
    }
  }
  check_optimizer(ckpt, optimizer);  // fail before the model changes
  {
    torch::NoGradGuard guard;
    for (auto& [dst, src] : copies) dst.copy_(src);
  }
  ckpt.restore_optimizer(optimizer);
  ckpt.restore_rng();
}

int64_t export_weights(const fs::path& checkpoint, const fs::path& out, bool overwrite,
                       fs::path* config_written) {
  std::error_code ec;
  if (fs::is_directory(out, ec)) {
    throw ConfigError("-o " + out.string() + ": is a folder; give the file to write, e.g. " +
                      (out / "model.safetensors").string());
  }
  if (fs::exists(out, ec) && fs::equivalent(out, checkpoint, ec)) {
    throw ConfigError("-o " + out.string() + ": is the checkpoint being exported; write elsewhere");
  }
  if (!overwrite && fs::exists(out, ec)) {
    throw ConfigError(out.string() + ": exists; pass --force to replace it");
  }
  const auto ckpt = read_checkpoint(checkpoint);
  const auto tensors = ckpt.model_tensors();
  std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"accel_bench_source", checkpoint.filename().string()},
      {"accel_bench_progress",
       nlohmann::json{{"epoch", ckpt.progress.epoch}, {"step", ckpt.progress.step}}.dump()},
      {"accel_bench_config", ckpt.config.dump()}};
  // A family with transformers' names (text) also gets the config.json a
  // Hugging Face loader reads beside the weights.
  nlohmann::json hf;
  const auto& model = ckpt.config.value("model", nlohmann::json::object());
  const auto* family = models::find_family(model.value("arch", std::string("vit")));
  if (family) {
    const auto& f = models::model_family(family->arch);
    if (f.hf_config) {
      hf = f.hf_config(model, tensors,
                       ckpt.progress.extra.value("class_names", std::vector<std::string>{}));
    }
  }
  const fs::path hf_file = (out.has_parent_path() ? out.parent_path() : fs::path(".")) / "config.json";
  if (!hf.is_null() && fs::exists(hf_file, ec)) {
    // Never a run's own resolved config (a run folder holds config.json too).
    bool run_config = false;
    try {
      const auto doc = parse_json_or_discarded(read_input_file(hf_file, ""));
      run_config = doc.is_object() && doc.contains("runtime") && doc.contains("train");
    } catch (const std::exception&) {
    }
    if (run_config) {
      throw ConfigError(hf_file.string() + ": is an accel-bench run's config, which transformers' "
                        "config.json would replace; export into another folder");
    }
    if (!overwrite) throw ConfigError(hf_file.string() + ": exists; pass --force to replace it");
  }
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  models::write_safetensors(out, tensors, meta);
  if (!hf.is_null()) {
    metrics::write_json_atomic(hf_file, hf);
    if (config_written) *config_written = hf_file;
  }
  return int64_t(tensors.size());
}

}  // namespace accel::train
