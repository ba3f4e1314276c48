#include "accel/machine/machine.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "accel/metrics/hardware.h"
#include "accel/metrics/metrics.h"
#include "accel/util/json_doc.h"

namespace accel::machine {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : text + " ") {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.') {
      cur += char(std::tolower(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  return out;
}

// The GPU's name as the environment block gives it, under the names a
// result.json may use.
std::string gpu_name(const nlohmann::json& env) {
  for (const char* key : {"gpu_name", "gpu_model", "gpu/name", "gpu"}) {
    const auto v = str_at(env, key);
    if (!v.empty()) return v;
  }
  if (env.contains("gpus") && env["gpus"].is_array() && !env["gpus"].empty()) {
    const auto& g = env["gpus"][0];
    if (g.is_string()) return g.get<std::string>();
    return str_at(g, "name");
  }
  return "";
}

// nvidia-smi's name for GPU 0, for a LibTorch whose env block has no name.
std::string nvidia_smi_name() {
  FILE* p = ::popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", "r");
  if (p == nullptr) return "";
  char buf[256] = {0};
  std::string out = std::fgets(buf, sizeof(buf), p) ? buf : "";
  ::pclose(p);
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out;
}

}  // namespace

std::string isa_tag(const std::string& flags) {
  const auto c = metrics::parse_cpu_flags(flags);
  if (c.amx_bf16) return "amx";
  if (c.avx512_bf16) return "avx512bf16";
  if (c.avx512f) return "avx512";
  if (c.avx2) return "avx2";
  return "";
}

std::string slug(const std::string& text) {
  std::string out;
  for (const auto& w : words(text)) {
    if (w == "r" || w == "tm" || w == "cpu" || w == "with" || w.find("ghz") != std::string::npos) {
      continue;
    }
    if (!out.empty() && out.back() != '-') out += '-';
    out += w;
  }
  // "@ 2.20GHz" leaves nothing, but a stray trailing '-' could remain.
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

std::string machine_id(const nlohmann::json& env, const std::string& isa) {
  std::string id;
  const int gpus = int(num_at(env, "gpu_count").value_or(0));
  const auto gpu = gpu_name(env);
  if (gpus > 0) {
    id = slug(gpu.empty() ? "gpu" : gpu) + "-x" + std::to_string(gpus);
  } else {
    id = slug(str_at(env, "cpu_model", "unknown-cpu"));
    // The class tells apart CPUs a generic model name does not (a VM's "AMD
    // EPYC" is a Zen 4 or a Zen 5); an env recorded before it was kept has
    // none, and its id reads as it always did.
    if (const auto cls = slug(str_at(env, "cpu_class")); !str_at(env, "cpu_class").empty()) id += "-" + cls;
    id += "-" + std::to_string(int(num_at(env, "cores").value_or(0))) + "c";
    if (!isa.empty()) id += "-" + isa;
  }
  id += "-lt" + str_at(env, "libtorch_version", "unknown");
  const auto cuda = str_at(env, "cuda_version");
  if (gpus > 0 && !cuda.empty()) id += "-cu" + cuda;
  return id;
}

nlohmann::json this_machine() {
  auto env = metrics::environment(metrics::default_threads(1));
  if (int(num_at(env, "gpu_count").value_or(0)) > 0 && gpu_name(env).empty()) {
    const auto name = nvidia_smi_name();
    if (!name.empty()) env["gpu_name"] = name;
  }
  nlohmann::json m;
  m["isa"] = isa_tag(metrics::cpu_flags_line());
  m["cpu_flags_of_note"] = metrics::cpu_features().names();
  m["env"] = env;
  m["id"] = machine_id(env, m["isa"].get<std::string>());
  return m;
}

}  // namespace accel::machine
