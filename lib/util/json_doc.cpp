#include "accel/util/json_doc.h"

#include <algorithm>

#include "accel/util/errors.h"
#include "accel/util/input_file.h"

namespace fs = std::filesystem;

namespace accel {

int json_nesting_depth(const std::string& text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
  }
  return deepest;
}

Json parse_json_text(const std::string& text, const std::string& name) {
  if (json_nesting_depth(text) > kMaxJsonDepth) {
    throw ConfigError(name + ": nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw ConfigError(name + ": not JSON: " + e.what());
  }
}

Json parse_json_or_discarded(const std::string& text) {
  if (json_nesting_depth(text) > kMaxJsonDepth) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string clean_text(const std::string& text, size_t cap, bool keep_lines) {
  static const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(std::min(text.size(), cap) + 3);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    uint32_t cp = 0;
    size_t len = 0;
    if (c < 0x80) {
      cp = c, len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      cp = c & 0x1F, len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      cp = c & 0x0F, len = 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      cp = c & 0x07, len = 4;
    }
    bool valid = len > 0 && i + len <= n;
    for (size_t k = 1; valid && k < len; ++k) {
      valid = (s[i + k] & 0xC0) == 0x80;
      cp = cp << 6 | (s[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are ill-formed too.
    if (valid && ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
                  (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))) {
      valid = false;
    }
    std::string piece;
    if (!valid) {
      piece = kReplacement;
      len = 1;  // resynchronise on the next byte
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) {
      piece = keep_lines && (cp == '\n' || cp == '\t') ? std::string(1, char(cp)) : std::string(" ");
    } else if ((cp & 0xFFFE) == 0xFFFE || (cp >= 0xFDD0 && cp <= 0xFDEF)) {
      piece = kReplacement;  // noncharacters
    } else {
      piece.assign(text, i, len);
    }
    if (out.size() + piece.size() > cap) {
      out += "\xE2\x80\xA6";  // U+2026, the ellipsis
      return out;
    }
    out += piece;
    i += len;
  }
  return out;
}

void clean_strings(Json& doc, size_t cap) {
  if (doc.is_string()) {
    const auto& s = doc.get_ref<const std::string&>();
    std::string c = clean_text(s, cap);
    if (c != s) doc = std::move(c);
  } else if (doc.is_array()) {
    for (auto& v : doc) clean_strings(v, cap);
  } else if (doc.is_object()) {
    bool keys_clean = true;
    for (auto it = doc.begin(); it != doc.end() && keys_clean; ++it) keys_clean = clean_text(it.key(), cap) == it.key();
    if (keys_clean) {
      for (auto& v : doc) clean_strings(v, cap);
      return;
    }
    Json out = Json::object();
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      Json v = std::move(it.value());
      clean_strings(v, cap);
      out[clean_text(it.key(), cap)] = std::move(v);
    }
    doc = std::move(out);
  }
}

Json read_json_file(const fs::path& file) {
  // A FIFO or device in a result set would block the open or never end.
  std::string text;
  try {
    text = read_input_file(file, "");
  } catch (const DataError& e) {
    throw ConfigError(e.what());
  }
  return parse_json_text(text, file.string());
}

namespace {

const Json* path_at(const Json& doc, const std::string& path) {
  const Json* cur = &doc;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const std::string key = path.substr(start, slash == std::string::npos ? slash : slash - start);
    if (!cur->is_object() || !cur->contains(key)) return nullptr;
    cur = &(*cur)[key];
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return cur;
}

}  // namespace

OptNum num_at(const Json& doc, const std::string& path) {
  const Json* v = path_at(doc, path);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

std::string str_at(const Json& doc, const std::string& path, const std::string& fallback) {
  const Json* v = path_at(doc, path);
  if (v == nullptr) return fallback;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number() || v->is_boolean()) return v->dump();
  return fallback;
}

}  // namespace accel
