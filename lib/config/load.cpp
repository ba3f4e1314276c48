// Loading: read and parse files, follow "extends" chains, apply --set
// assignments, then hand the merged document to validate(). Each leaf keeps
// the name of the file (or --set) that last assigned it, so validation
// messages point at the right place.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "accel/config/run_config.h"
#include "accel/util/errors.h"
#include "accel/util/input_file.h"
#include "json_text.h"
#include "schema.h"

namespace accel::config {
namespace detail {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Loaded {
  json doc = json::object();
  Origins origins;
};

// One file on the current extends path, for cycle detection.
struct Link {
  fs::path canonical;
  std::string display;
};

void forget(Origins& o, const std::string& path) {
  auto it = o.lower_bound(path);
  while (it != o.end() && (it->first == path || it->first.rfind(path + ".", 0) == 0))
    it = o.erase(it);
}

// Deep merge: objects merge per key, anything else (lists included) is
// replaced whole, and null removes the key so a child can restore a default.
void merge(json& base, const json& over, const std::string& at, Origins& o,
           const std::string& origin) {
  for (const auto& item : over.items()) {
    const std::string& k = item.key();
    const json& v = item.value();
    std::string path = at.empty() ? k : at + "." + k;
    if (v.is_null()) {
      base.erase(k);
      forget(o, path);
      continue;
    }
    o[path] = origin;
    if (v.is_object()) {
      if (!base.contains(k) || !base[k].is_object()) base[k] = json::object();
      merge(base[k], v, path, o, origin);
    } else {
      base[k] = v;
    }
  }
}

constexpr size_t kMaxConfigBytes = size_t{16} << 20;

// `regular_only`: an extends target must be a regular file; opening a FIFO
// nobody writes to would block for ever. The config named on the command line
// may be a pipe (`-c <(jq ... base.json)`): the user is its writer.
// A config file's text, through the one checked reader (util/input_file.h):
// bounded, never a device; a FIFO only where `pipe_ok` (the file named on
// the command line, e.g. `-c <(...)`). `why` without the file's name.
bool read_text(const fs::path& p, std::string& text, std::string& why, bool pipe_ok) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    why = "is a directory";
    return false;
  }
  if (!fs::exists(p, ec)) {
    why = std::strerror(ENOENT);
    return false;
  }
  try {
    text = read_input_file(p, "", int64_t(kMaxConfigBytes), pipe_ok);
    return true;
  } catch (const std::exception& e) {
    why = e.what();
    const std::string prefix = p.string() + ": ";
    if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
    if (why.rfind("larger than", 0) == 0) {
      why = "larger than " + std::to_string(kMaxConfigBytes >> 20) + " MiB; a run config is a few KB";
    }
    return false;
  }
}

Loaded load_file(const fs::path& file, std::vector<Link>& chain, const std::string& context);

// The shorthand `"init": {"checkpoint": PATH, "strict": false}` (or
// {"safetensors": PATH, "format": "timm"}) is spelled out into the flat fields
// model.init / init_path / init_strict / init_format, which the schema checks.
json expand_init_shorthand(json doc, const std::string& pre) {
  auto model = doc.find("model");
  if (model == doc.end() || !model->is_object()) return doc;
  auto init = model->find("init");
  if (init == model->end() || !init->is_object()) return doc;
  json spec = *init;
  json flat = json::object();
  for (const char* kind : {"checkpoint", "safetensors", "gguf"}) {
    if (!spec.contains(kind)) continue;
    if (flat.contains("init"))
      throw ConfigError(pre + "model.init: give one of \"checkpoint\", \"safetensors\" or \"gguf\"");
    flat["init"] = kind;
    flat["init_path"] = spec[kind];
    spec.erase(kind);
  }
  if (!flat.contains("init"))
    throw ConfigError(pre + "model.init: an object needs a \"checkpoint\", \"safetensors\" or \"gguf\" path");
  for (auto& [key, value] : spec.items()) {
    if (key != "strict" && key != "format" && key != "head")
      throw ConfigError(pre + "model.init: unknown key \"" + printable(key) +
                        "\"; valid keys: checkpoint, safetensors, gguf, strict, format, head");
    flat["init_" + key] = value;
  }
  model->erase("init");
  for (auto& [key, value] : flat.items()) (*model)[key] = value;
  return doc;
}

// Resolves one parsed document: its parent first (if any), then its own keys
// on top. `display` names it in messages ("" for an in-memory document).
Loaded resolve_doc(const json& raw, const std::string& display, const fs::path& dir,
                   std::vector<Link>& chain) {
  std::string pre = display.empty() ? "" : display + ": ";
  const json doc = expand_init_shorthand(raw, pre);
  check_keys(doc, display);
  Loaded out;
  auto ext = doc.find("extends");
  if (ext != doc.end() && !ext->is_null()) {
    if (!ext->is_string() || ext->get<std::string>().empty())
      throw ConfigError(pre + "extends: expected a path to a parent config, got " + show(*ext));
    fs::path target = ext->get<std::string>();
    fs::path full = target.is_absolute() ? target : (dir / target).lexically_normal();
    out = load_file(full, chain, pre + "extends \"" + target.string() + "\": ");
  }
  json body = doc;
  body.erase("extends");
  merge(out.doc, body, "", out.origins, display);
  return out;
}

// `context` prefixes read errors of a parent ('a.json: extends "b.json": ').
Loaded load_file(const fs::path& file, std::vector<Link>& chain, const std::string& context) {
  std::string display = file.string();
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(file, ec);
  if (ec) canonical = fs::absolute(file).lexically_normal();
  for (const auto& link : chain) {
    if (link.canonical != canonical) continue;
    std::string cycle;
    for (const auto& l : chain) cycle += l.display + " -> ";
    throw ConfigError(context + "extends cycle: " + cycle + display);
  }
  std::string text, why;
  if (!read_text(file, text, why, /*pipe_ok=*/context.empty()))
    throw ConfigError(context.empty() ? display + ": cannot read config file (" + why + ")"
                                      : context + "cannot read " + display + " (" + why + ")");
  json doc = parse_config_text(text, display);
  chain.push_back({canonical, display});
  Loaded out = resolve_doc(doc, display, file.parent_path(), chain);
  chain.pop_back();
  return out;
}

// Command-line text as messages show it: control characters (a newline
// would split the one-line message) as \xNN.
std::string escaped(const std::string& text) {
  std::string shown;
  for (char c : text) {
    char esc[8];
    std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    shown += static_cast<unsigned char>(c) < 0x20 ? std::string(esc) : std::string(1, c);
  }
  return shown;
}

// Why `path` is not a --set target, for the error message.
std::string bad_set_path(const std::string& path) {
  auto dot = path.find('.');
  const auto& secs = sections();
  if (dot == std::string::npos) {
    if (std::find(secs.begin(), secs.end(), path) != secs.end())
      return "\"" + path + "\" is a section; set one of its keys: " +
             join(keys_of(path), ", ");
    return "unknown key \"" + path + "\"; top-level keys that --set accepts: " +
           join(keys_of(""), ", ");
  }
  std::string section = path.substr(0, dot);
  if (std::find(secs.begin(), secs.end(), section) == secs.end()) {
    std::string near = closest(section, secs);
    return "unknown section \"" + section + "\"; valid sections: " + join(secs, ", ") +
           (near.empty() ? "" : "; did you mean \"" + near + "\"?");
  }
  return unknown_key(section, path.substr(dot + 1));
}

// The value is JSON if it parses as JSON, else the plain text, so both
// optim.lr=1e-4 and runtime.precision=bf16-mixed work unquoted. A string
// field always takes the text (name=123 is the name "123", precision=16 is
// the alias "16"); null restores the default.
json set_value(const Field& f, const std::string& text, const std::string& where) {
  std::optional<json> v = parse_set_value(text, where);
  if (!v || (f.type == Type::String && !v->is_string() && !v->is_null())) {
    // Plain text must be UTF-8 like everything in a JSON document (the
    // resolved config is printed and saved as JSON).
    try {
      (void)json(text).dump();
    } catch (const json::exception&) {
      throw ConfigError(where + "the value is not valid UTF-8");
    }
    return text;
  }
  return *v;
}

// An assignment as messages show it: a long one (a pasted list, or garbage)
// is cut so the message stays one readable line.
std::string set_label(const std::string& a) {
  return "--set \"" + escaped(a.size() > 60 ? a.substr(0, 57) : a) + (a.size() > 60 ? "...\"" : "\"");
}

void apply_sets(Loaded& l, const std::vector<std::string>& sets) {
  for (const auto& a : sets) {
    const std::string label = set_label(a);
    auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(label + ": expected section.key=value");
    std::string path = a.substr(0, eq);
    const Field* f = find_field(path);
    if (!f) throw ConfigError(label + ": " + bad_set_path(escaped(path)));
    json patch = json::object();
    json value = set_value(*f, a.substr(eq + 1), label + ": ");
    if (f->section.empty())
      patch[f->key] = value;
    else
      patch[f->section][f->key] = value;
    merge(l.doc, patch, "", l.origins, label);
  }
}

}  // namespace
}  // namespace detail

nlohmann::json load_config(const std::filesystem::path& file,
                           const std::vector<std::string>& sets) {
  std::vector<detail::Link> chain;
  detail::Loaded l = detail::load_file(file, chain, "");
  detail::apply_sets(l, sets);
  return detail::validate(l.doc, l.origins);
}

nlohmann::json resolve_config(const nlohmann::json& doc, const std::filesystem::path& base_dir,
                              const std::vector<std::string>& sets) {
  // `resolve_config({}, ...)` passes a JSON null: treat it as an empty document.
  const nlohmann::json& body = doc.is_null() ? nlohmann::json::object() : doc;
  std::vector<detail::Link> chain;
  detail::Loaded l = detail::resolve_doc(body, "", base_dir, chain);
  detail::apply_sets(l, sets);
  return detail::validate(l.doc, l.origins);
}

}  // namespace accel::config
