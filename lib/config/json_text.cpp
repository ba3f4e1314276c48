// Config text to JSON in two passes: a SAX pass that checks the document's
// shape while it is read (nlohmann's SAX parser is iterative, so depth costs
// no stack), then the ordinary parse of a document now known to be sane.
#include "json_text.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "accel/util/errors.h"

namespace accel::config::detail {

std::string printable(const std::string& key) {
  const std::string q = nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return q.substr(1, q.size() - 2);
}

namespace {

using nlohmann::json;

// Records the first problem and stops the parse (by returning false).
class ShapeCheck : public nlohmann::json_sax<json> {
 public:
  std::string problem;     // set when the document is refused
  bool malformed = false;  // the text is not JSON at all
  bool overflow = false;   // malformed by a number beyond a double (1e999)
  size_t error_byte = 0;   // for malformed: bytes read when the parser gave up

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    if (!f.keys.insert(k).second)
      return refuse("duplicate key \"" + path() +
                    "\": an object may name a key once (JSON readers would silently keep "
                    "only the last)");
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    malformed = true;
    overflow = ex.id == 406;  // nlohmann's out_of_range "number overflow"
    error_byte = position;
    problem = ex.what();
    return false;
  }

 private:
  struct Frame {
    bool object = false;
    std::set<std::string> keys;  // object: keys seen so far
    std::string key;             // object: the current key
    size_t index = 0;            // list: the current element
  };
  std::vector<Frame> frames_;

  bool refuse(std::string why) {
    problem = std::move(why);
    return false;
  }

  bool open(bool object) {
    if (frames_.size() >= static_cast<size_t>(kMaxDepth))
      return refuse("nested deeper than " + std::to_string(kMaxDepth) + " levels (at \"" +
                    path() + "\"); a run config needs 3");
    frames_.push_back({});
    frames_.back().object = object;
    return true;
  }

  bool close() {
    frames_.pop_back();
    return value();
  }

  // One more complete element in the enclosing list, if any.
  bool value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }

  // Where the parser is, as "train.epochs" or "data.classes[2]"; long paths
  // (only deep ones get long) are cut.
  std::string path() const {
    std::string p;
    for (const auto& f : frames_) {
      if (f.object)
        p += (p.empty() ? "" : ".") + printable(f.key);
      else
        p += "[" + std::to_string(f.index) + "]";
      if (p.size() > 60) return p.substr(0, 60) + "...";
    }
    return p.empty() ? "(top level)" : p;
  }
};

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
// nlohmann's "...; last read: '<token>'" repeats the token read so far, which
// for an unterminated string is the rest of the file: keep a short tail of it
// so the message stays one readable line.
std::string short_last_read(std::string why) {
  const std::string mark = "last read: '";
  const auto at = why.find(mark);
  constexpr size_t kKeep = 40;
  if (at == std::string::npos) return why;
  const size_t start = at + mark.size();
  const size_t end = why.rfind('\'');
  if (end == std::string::npos || end <= start || end - start <= kKeep) return why;
  return why.substr(0, start) + "..." + why.substr(end - kKeep, kKeep) + why.substr(end);
}

std::string reason(const std::string& what) {
  const auto col = what.find("column ");
  const auto sep = what.find(": ", col == std::string::npos ? 0 : col);
  if (col != std::string::npos && sep != std::string::npos) return short_last_read(what.substr(sep + 2));
  // "[json.exception.out_of_range.406] number overflow ...": drop the tag.
  const auto tag = what.find("] ");
  if (what.rfind("[json.exception.", 0) == 0 && tag != std::string::npos) return what.substr(tag + 2);
  return short_last_read(what);
}

}  // namespace

json parse_config_text(const std::string& text, const std::string& display) {
  const std::string pre = display + ": ";
  // Said here, not by nlohmann: its wording for empty input differs between
  // 3.11.2 (Debian 12) and 3.11.3 (Debian 13).
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw ConfigError(pre + "malformed JSON at line 1, column 1: the file is empty");
  ShapeCheck check;
  if (!json::sax_parse(text, &check)) {
    if (!check.malformed) throw ConfigError(pre + check.problem);
    auto [line, col] = line_col(text, check.error_byte);
    throw ConfigError(pre + (check.overflow ? "number out of range" : "malformed JSON") +
                      " at line " + std::to_string(line) + ", column " + std::to_string(col) +
                      ": " + reason(check.problem));
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // not expected after the check above
    throw ConfigError(pre + "malformed JSON: " + reason(e.what()));
  }
}

std::optional<json> parse_set_value(const std::string& text, const std::string& where) {
  ShapeCheck check;
  if (!json::sax_parse(text, &check)) {
    if (check.malformed) return std::nullopt;
    throw ConfigError(where + check.problem);
  }
  json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

}  // namespace accel::config::detail
