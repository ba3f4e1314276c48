// Loading: read and parse files, follow "extends" chains, apply --set
// assignments, then hand the merged document to validate(). Each leaf keeps
// the name of the file (or --set) that last assigned it, so validation
// messages point at the right place.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "accel/config/run_config.h"
#include "accel/util/errors.h"
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

bool read_text(const fs::path& p, std::string& text, std::string& why) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    why = "is a directory";
    return false;
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    why = std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    why = "read error";
    return false;
  }
  text = ss.str();
  return true;
}

// nlohmann reports the byte count read when it failed; turn it into the
// 1-based line and column of the last character read.
std::pair<size_t, size_t> line_col(const std::string& text, size_t byte) {
  size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1, col = 1;
  for (size_t k = 0; k < end; ++k) {
    if (text[k] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

// nlohmann's message without its "[json.exception...] parse error at line
// L, column C: " preamble, which we replace with our own position.
std::string reason(const std::string& what) {
  auto col = what.find("column ");
  auto sep = what.find(": ", col == std::string::npos ? 0 : col);
  return sep == std::string::npos ? what : what.substr(sep + 2);
}

json parse(const std::string& text, const std::string& display) {
  // Said here, not by nlohmann: its wording for empty input differs between
  // 3.11.2 (Debian 12) and 3.11.3 (Debian 13).
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw ConfigError(display + ": malformed JSON at line 1, column 1: the file is empty");
  }
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    auto [line, col] = line_col(text, e.byte);
    throw ConfigError(display + ": malformed JSON at line " + std::to_string(line) +
                      ", column " + std::to_string(col) + ": " + reason(e.what()));
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
  for (const char* kind : {"checkpoint", "safetensors"}) {
    if (!spec.contains(kind)) continue;
    if (flat.contains("init"))
      throw ConfigError(pre + "model.init: give one of \"checkpoint\" or \"safetensors\"");
    flat["init"] = kind;
    flat["init_path"] = spec[kind];
    spec.erase(kind);
  }
  if (!flat.contains("init"))
    throw ConfigError(pre + "model.init: an object needs a \"checkpoint\" or \"safetensors\" path");
  for (auto& [key, value] : spec.items()) {
    if (key != "strict" && key != "format" && key != "head")
      throw ConfigError(pre + "model.init: unknown key \"" + key +
                        "\"; valid keys: checkpoint, safetensors, strict, format, head");
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
  if (!read_text(file, text, why))
    throw ConfigError(context.empty() ? display + ": cannot read config file (" + why + ")"
                                      : context + "cannot read " + display + " (" + why + ")");
  json doc = parse(text, display);
  chain.push_back({canonical, display});
  Loaded out = resolve_doc(doc, display, file.parent_path(), chain);
  chain.pop_back();
  return out;
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
json set_value(const Field& f, const std::string& text) {
  json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return text;
  if (f.type == Type::String && !v.is_string() && !v.is_null()) return text;
  return v;
}

void apply_sets(Loaded& l, const std::vector<std::string>& sets) {
  for (const auto& a : sets) {
    auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("--set \"" + a + "\": expected section.key=value");
    std::string path = a.substr(0, eq);
    const Field* f = find_field(path);
    if (!f) throw ConfigError("--set \"" + a + "\": " + bad_set_path(path));
    json patch = json::object();
    json value = set_value(*f, a.substr(eq + 1));
    if (f->section.empty())
      patch[f->key] = value;
    else
      patch[f->section][f->key] = value;
    merge(l.doc, patch, "", l.origins, "--set \"" + a + "\"");
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
