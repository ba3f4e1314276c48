#include "accel/plan/accelerator.h"

#include <algorithm>
#include <deque>

#include "accel/util/errors.h"
#include "accel/util/json_doc.h"

namespace accel::plan {

namespace {

// A deque: a row's address holds while rows are added.
std::deque<AcceleratorRow>& rows() {
  static std::deque<AcceleratorRow> r = {
      {"cpu", "the host's cores; ranks of threads", "gloo", false, false, false,
       "process RSS, the high-water mark of the whole process", true},
      {"cuda", "NVIDIA GPUs through LibTorch's CUDA", "nccl", true, true, true,
       "the CUDA caching allocator's peak", false},
  };
  return r;
}

}  // namespace

int MachineFacts::devices_of(const std::string& kind) const {
  if (kind == "cpu") return 1;
  const auto it = devices.find(kind);
  return it == devices.end() ? 0 : std::max(0, it->second);
}

MachineFacts facts_from_env(const Json& env) {
  MachineFacts f;
  f.cores = int_at(env, "cores", 1, 1, 1 << 20);
  f.devices["cuda"] = int_at(env, "gpu_count", 0, 0, 1 << 16);
  if (env.is_object() && env.contains("cpu_features") && env["cpu_features"].is_array()) {
    std::string flags;
    for (const auto& name : env["cpu_features"]) {
      if (name.is_string()) flags += name.get<std::string>() + " ";
    }
    f.cpu = metrics::parse_cpu_flags(flags);
  }
  return f;
}

const std::deque<AcceleratorRow>& accelerator_catalog() { return rows(); }

void add_accelerator(AcceleratorRow row) {
  if (row.kind.empty() || row.kind == "auto" || find_accelerator(row.kind) != nullptr) {
    throw ConfigError("accelerator registry: \"" + row.kind + "\" is empty, \"auto\" or taken");
  }
  rows().push_back(std::move(row));
}

void remove_accelerator(const std::string& kind) {
  auto& r = rows();
  const auto it = std::find_if(r.begin(), r.end(), [&](const AcceleratorRow& row) { return row.kind == kind; });
  if (it == r.end() || it == r.begin()) return;  // the host stays
  r.erase(it);
}

const AcceleratorRow* find_accelerator(const std::string& kind) {
  for (const auto& r : rows()) {
    if (r.kind == kind) return &r;
  }
  return nullptr;
}

const AcceleratorRow* accelerator_of_device(const std::string& device) {
  return find_accelerator(device.substr(0, device.find(':')));
}

std::vector<std::string> accelerator_choices() {
  std::vector<std::string> out;
  for (const auto& r : rows()) out.push_back(r.kind);
  out.push_back("auto");
  return out;
}

const AcceleratorRow& resolve_accelerator(const std::string& requested, const MachineFacts& facts) {
  if (requested == "auto") {
    for (const auto& r : rows()) {
      if (!r.host && facts.devices_of(r.kind) > 0) return r;
    }
    return rows().front();
  }
  if (const auto* r = find_accelerator(requested)) return *r;
  std::string known;
  for (const auto& c : accelerator_choices()) known += (known.empty() ? "\"" : ", \"") + c + "\"";
  throw ConfigError("runtime.accelerator: unknown accelerator \"" + clean_text(requested, 100) + "\" (one of " +
                    known + ")");
}

std::string accelerator_kind_of(const std::string& requested, const MachineFacts& facts, const std::string& fallback) {
  if (requested != "auto" && find_accelerator(requested) == nullptr) return fallback;
  return resolve_accelerator(requested, facts).kind;
}

}  // namespace accel::plan
