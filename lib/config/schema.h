// Private to lib/config: the schema table and the helpers that loading and
// validation share. Nothing here depends on torch, so the config code can be
// built and tested on its own.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accel/util/json.h"

namespace accel::config::detail {

enum class Type { Int, Float, Bool, String, IntList };

// How wide an Int field is once converted to the struct; values outside the
// C++ type are rejected instead of silently wrapping.
enum class IntKind { I32, I64, U64 };

// One row of the schema. Built with the chaining setters in schema.cpp.
struct Field {
  std::string path;      // "train.batch_size"; top-level fields have no dot
  std::string section;   // "train"; "" for top-level fields
  std::string key;       // "batch_size"
  Type type = Type::String;
  nlohmann::json def;    // the default, already in normalised form
  std::string doc;
  IntKind int_kind = IntKind::I32;
  std::optional<double> min, max;      // for Int, Float and IntList entries
  bool min_open = false, max_open = false;  // exclusive bounds
  std::vector<std::string> choices;    // String: allowed values
  std::vector<std::pair<std::string, std::string>> aliases;  // alias -> name
  bool unique = false;    // IntList: no repeated entries
  bool nonempty = false;  // String: "" rejected
  std::vector<std::string> words;  // Int: strings also accepted as themselves ("auto")
  // Where the field means something: a model.arch ("vit"), a data kind
  // ("image", "text") or a data.dataset ("text-csv"); empty = every config.
  // A config that sets a field outside its tags is refused, naming them; the
  // resolved document leaves such fields out.
  std::vector<std::string> tags;
  // Defaults that differ by tag (the first whose tag is active wins).
  std::vector<std::pair<std::string, nlohmann::json>> tag_defaults;
  // Added after result sets were first recorded, its default what every run
  // before it did (config::drop_added_defaults).
  bool added_later = false;

  Field& at_least(double v) { min = v; min_open = false; return *this; }
  Field& above(double v) { min = v; min_open = true; return *this; }
  Field& at_most(double v) { max = v; max_open = false; return *this; }
  Field& below(double v) { max = v; max_open = true; return *this; }
  Field& one_of(std::vector<std::string> c) { choices = std::move(c); return *this; }
  Field& alias(std::string from, std::string to) {
    aliases.emplace_back(std::move(from), std::move(to));
    return *this;
  }
  Field& kind(IntKind k) { int_kind = k; return *this; }
  Field& no_duplicates() { unique = true; return *this; }
  Field& since_results() { added_later = true; return *this; }
  Field& not_empty() { nonempty = true; return *this; }
  Field& or_word(std::string w) { words.push_back(std::move(w)); return *this; }
  Field& only(std::vector<std::string> t) { tags = std::move(t); return *this; }
  Field& default_for(std::string tag, nlohmann::json v) {
    tag_defaults.emplace_back(std::move(tag), std::move(v));
    return *this;
  }
};

// The tags a document activates (Field::tags): its model.arch, its data kind
// and its data.dataset.
struct Active {
  std::string arch, kind, dataset;
  bool has(const std::string& tag) const { return tag == arch || tag == kind || tag == dataset; }
};
bool applies(const Field& f, const Active& active);
// The field's default under these tags.
nlohmann::json default_of(const Field& f, const Active& active);

// The table, in explain order: top-level fields, then model, data, optim,
// train, runtime.
const std::vector<Field>& schema();
const std::vector<std::string>& sections();
// Top-level keys a document may hold: extends, the top-level fields, sections.
const std::vector<std::string>& top_level_keys();
const Field* find_field(const std::string& path);
std::vector<std::string> keys_of(const std::string& section);

// "expected an integer >= 1", "expected a number in [0, 1)", ...
std::string expectation(const Field& f);
// ">= 1", "in [0, 1)", "" when unbounded (bounds only, no type word).
std::string range_text(const Field& f);
// The closest of `candidates` to `word` when it is an obvious typo, else "".
std::string closest(const std::string& word,
                    const std::vector<std::string>& candidates);
// A value as it appears in messages: compact JSON, long values shortened.
std::string show(const nlohmann::json& v);
std::string join(const std::vector<std::string>& items, const char* sep);

// Which file (or --set assignment) last set each JSON path, so messages can
// name it. An empty origin means "in-memory document": no prefix.
using Origins = std::map<std::string, std::string>;
std::string prefix(const Origins& origins, const std::string& path);

// 'unknown key "train.epoch"; valid keys in "train": ...; did you mean ...'
std::string unknown_key(const std::string& section, const std::string& key);

// Rejects unknown top-level keys, unknown sections and unknown keys inside a
// section, and sections that are not objects. Run on each file on its own so
// the message names the file the key is in.
void check_keys(const nlohmann::json& doc, const std::string& origin);

// Type/range/choice checks, alias normalisation, defaults and cross-field
// checks on a merged document (no "extends"). Returns the resolved document.
nlohmann::json validate(const nlohmann::json& merged, const Origins& origins);

}  // namespace accel::config::detail
