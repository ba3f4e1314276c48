// Reading JSON documents defensively: result.json, sweep.json, peaks.json,
// suites. A field that is missing or null reads as "n/a" (std::nullopt or the
// fallback), never 0, so files of older or newer schemas still load.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "accel/util/json.h"

namespace accel {

using Json = nlohmann::json;
using OptNum = std::optional<double>;

// How deep objects and lists may nest in any JSON accel-bench reads: result
// sets, histories, tune state, checkpoints, peaks. Far beyond any file it
// writes (result.json nests 4); far below what overflows the stack when a
// document is copied, printed or destroyed (about 100,000 levels).
inline constexpr int kMaxJsonDepth = 256;

// The deepest nesting of objects and lists in TEXT, counted without parsing
// (brackets inside strings do not count); stops counting past `limit`.
int json_nesting_depth(const std::string& text, int limit = kMaxJsonDepth);

// The one parser of every JSON document read from a file or a database row:
// ConfigError "<name>: nested deeper than 256 levels" before anything
// recurses over it, or "<name>: not JSON: ..." when malformed.
Json parse_json_text(const std::string& text, const std::string& name);
// The same without a message: a discarded value (is_discarded()) when the
// text is not JSON or nests too deep (a line of a log, a progress event).
Json parse_json_or_discarded(const std::string& text);

// Free text read from a file (a rung's changes, an error, a CPU's name) is
// cut at this many bytes, with an ellipsis: a doctored 1 MB string in every
// field would otherwise make a page of hundreds of MB.
inline constexpr size_t kMaxTextBytes = 4096;

// TEXT as valid UTF-8 that any reader shows as text: ill-formed UTF-8 and
// the noncharacters U+FFFE and U+FFFF (which XML forbids) become U+FFFD,
// C0 and C1 controls (ESC, CSI: terminal escape sequences) become spaces,
// except newlines and tabs when `keep_lines`; cut at `cap` bytes with "...".
std::string clean_text(const std::string& text, size_t cap = kMaxTextBytes, bool keep_lines = false);
// clean_text over every string and key of DOC (a result.json, a history row).
void clean_strings(Json& doc, size_t cap = kMaxTextBytes);

// Parses a JSON file; accel::ConfigError naming the file when missing, not
// JSON or nested too deep.
Json read_json_file(const std::filesystem::path& file);

// A number at a JSON pointer-like path ("step_time_ms/median"); nullopt when
// missing, null or not a number.
OptNum num_at(const Json& doc, const std::string& path);
// A number from a file as an int of [lo, hi]: a doctored 1e300 or NaN never
// reaches an integer cast (which would be undefined); NaN reads as lo.
inline int64_t bounded_int(double v, int64_t lo, int64_t hi) {
  if (!(v >= double(lo))) return lo;
  if (!(v <= double(hi))) return hi;
  return int64_t(v);
}
// num_at as such an int, or the fallback when missing.
inline int int_at(const Json& doc, const std::string& path, int fallback, int lo = 0, int hi = 1 << 20) {
  const auto v = num_at(doc, path);
  return v ? int(bounded_int(*v, lo, hi)) : fallback;
}
// A string at such a path; numbers and booleans as their JSON text; else fallback.
std::string str_at(const Json& doc, const std::string& path, const std::string& fallback = "");

}  // namespace accel
