// Private to lib/config: turning config text (a file, or a --set value) into
// a JSON document safely. Everything a document could do to hurt us is
// refused while it is read, before anything recurses over it: nesting deeper
// than kMaxDepth (a document 200,000 levels deep overflows the stack when
// copied or printed), a key repeated within one object (JSON parsers keep
// the last silently, so a repeated "train" section would drop the first) and
// numbers beyond a double's range (nlohmann's own check, reported as such).
#pragma once

#include <optional>
#include <string>

#include "accel/util/json.h"

namespace accel::config::detail {

// A key as it appears in a message: escaped like a JSON string (a key may
// hold a newline or a control character), without the quotes.
std::string printable(const std::string& key);

// Objects and lists inside each other. A run config needs 3 (top level,
// section, list or init object); the margin is for documents that are wrong
// in other ways and deserve a message about that instead.
constexpr int kMaxDepth = 64;

// Parses the text of a config file. Throws ConfigError starting with
// "<display>: " for empty text, malformed JSON (with line and column),
// nesting beyond kMaxDepth, a repeated key (with its JSON path) and
// out-of-range numbers.
nlohmann::json parse_config_text(const std::string& text, const std::string& display);

// A --set value: its JSON, or nullopt when the text is not JSON (then it is
// taken as a plain string). JSON that is too deep, repeats a key or holds
// out-of-range numbers throws ConfigError starting with `where`.
std::optional<nlohmann::json> parse_set_value(const std::string& text, const std::string& where);

}  // namespace accel::config::detail
