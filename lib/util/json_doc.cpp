#include "accel/util/json_doc.h"

#include "accel/util/errors.h"
#include "accel/util/input_file.h"

namespace fs = std::filesystem;

namespace accel {

Json read_json_file(const fs::path& file) {
  // A FIFO or device in a result set would block the open or never end.
  std::string text;
  try {
    text = read_input_file(file, "");
  } catch (const DataError& e) {
    throw ConfigError(e.what());
  }
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw ConfigError(file.string() + ": not JSON: " + e.what());
  }
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
