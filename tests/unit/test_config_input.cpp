// Config text that could hurt the loader: nesting deep enough to overflow the
// stack, repeated keys, numbers beyond a double, huge or endless files, odd
// --set values. Each is refused with one line naming the file and the path.
#include <doctest/doctest.h>

#include "support/config_error.h"
#include "support/temp_dir.h"

#include <filesystem>
#include <string>

#include "accel/config/run_config.h"
#include "accel/util/errors.h"
#include "accel/util/json_doc.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace accel::config;
using accel_test::config_error;
using accel_test::has;
using accel_test::TempDir;

void check_message(const std::string& msg, std::initializer_list<std::string> parts) {
  CHECK_MESSAGE(msg.find('\n') == std::string::npos, msg);
  CHECK_MESSAGE(msg.size() < 400, msg.size());
  for (const auto& p : parts) CHECK_MESSAGE(has(msg, p), "missing \"" << p << "\" in: " << msg);
}

std::string nested(const std::string& open, const std::string& close, int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

std::string load_error(const fs::path& file, const std::vector<std::string>& sets = {}) {
  return config_error([&] { load_config(file, sets); });
}

}  // namespace

TEST_CASE("config input: a document nested 200000 levels deep is refused, not a crash") {
  TempDir dir;
  // The issue's reproducer: {"name": [[[...]]]} 200,000 deep.
  const auto deep = dir.write("deep.json", "{\"name\":" + nested("[", "]", 200000) + "}");
  check_message(load_error(deep), {deep.string() + ": nested deeper than 64 levels",
                                   "at \"name[0][0]"});
  // Objects too, and in a parent config: the parent is named.
  std::string objs;
  for (int i = 0; i < 100000; ++i) objs += "{\"a\":";
  objs += "1" + std::string(100000, '}');
  const auto parent = dir.write("sub/objs.json", objs);
  const auto child = dir.write("child.json", R"({"extends": "sub/objs.json"})");
  check_message(load_error(child), {parent.string() + ": nested deeper than 64 levels",
                                    "at \"a.a.a."});
}

TEST_CASE("config input: the depth bound leaves room for real configs") {
  TempDir dir;
  // 64 levels is allowed (and then rejected for what it is: a wrong type).
  const auto ok = dir.write("d64.json", "{\"data\":{\"classes\":" + nested("[", "]", 62) + "}}");
  check_message(load_error(ok), {"d64.json: data.classes[0]: expected an integer"});
  const auto over = dir.write("d65.json", "{\"data\":{\"classes\":" + nested("[", "]", 63) + "}}");
  check_message(load_error(over), {"nested deeper than 64 levels", "at \"data.classes[0]"});
}

TEST_CASE("config input: a repeated key is rejected with the file and its JSON path") {
  TempDir dir;
  // The issue's case: a whole section repeated would drop train.epochs.
  const auto sec = dir.write("sec.json", R"({"train":{"epochs":7},"train":{"batch_size":8}})");
  check_message(load_error(sec), {sec.string() + ": duplicate key \"train\""});
  const auto leaf = dir.write("leaf.json", "{\"optim\": {\"lr\": 0.1,\n \"lr\": 0.2}}");
  check_message(load_error(leaf), {leaf.string() + ": duplicate key \"optim.lr\""});
  // Inside an init object, and the same key in two different objects is fine.
  const auto init = dir.write(
      "init.json", R"({"model":{"init":{"checkpoint":"a.ckpt","strict":false,"strict":true}}})");
  check_message(load_error(init), {"duplicate key \"model.init.strict\""});
  const auto two = dir.write("two.json", R"({"train":{"seed":1},"optim":{"name":"sgd"},"name":"x"})");
  CHECK(load_config(two)["train"]["seed"] == 1);
  // In a list element, and a key with a newline stays on one line.
  const auto list = dir.write("list.json", R"({"x":[1,{"k":1,"k":2}]})");
  check_message(load_error(list), {"duplicate key \"x[1].k\""});
  const auto nl = dir.write("nl.json", "{\"a\\nb\":1,\"a\\nb\":2}");
  check_message(load_error(nl), {"duplicate key \"a\\nb\""});
}

TEST_CASE("config input: numbers beyond a double are refused with their line and column") {
  TempDir dir;
  const auto big = dir.write("big.json", R"({"optim":{"lr":1e999}})");
  check_message(load_error(big), {big.string() + ": number out of range at line 1, column 20: ",
                                  "'1e999'"});
  const auto neg = dir.write("neg.json", "{\"train\":\n {\"epochs\":-1e400}}");
  check_message(load_error(neg), {neg.string() + ": number out of range at line 2, column",
                                  "'-1e400'"});
  // A huge integer reads as a float: out of the field's range, said as such.
  const auto huge = dir.write("huge.json", R"({"train":{"epochs":123456789012345678901234567890}})");
  check_message(load_error(huge), {huge.string() + ": train.epochs: ", "does not fit"});
}

TEST_CASE("config input: malformed JSON keeps its line and column after the shape check") {
  TempDir dir;
  const auto bad = dir.write("bad.json", "{\n  \"train\": {\n    \"epochs\": 5,\n  }\n}\n");
  check_message(load_error(bad), {bad.string() + ": malformed JSON at line 4, column 3: ",
                                  "unexpected '}'"});
  const auto ctl = dir.write("ctl.json", "{\"name\": \"a\nb\"}");
  check_message(load_error(ctl), {ctl.string() + ": malformed JSON at line 1, column 12"});
  const auto utf = dir.write("utf.json", "{\"name\": \"\xff\"}");
  check_message(load_error(utf), {utf.string() + ": malformed JSON"});
}

TEST_CASE("config input: an endless or huge config file is refused, a device before reading it and a file by size") {
  check_message(load_error("/dev/zero"), {"/dev/zero: cannot read config file", "not a regular file"});
  TempDir dir;
  const auto big = dir.write("big.json", "{\"name\": \"" + std::string((16 << 20) + 10, 'x') + "\"}");
  check_message(load_error(big), {big.string(), "larger than 16 MiB"});
}

TEST_CASE("config input: --set values that are too deep or not UTF-8 are refused on one line") {
  TempDir dir;
  const auto base = dir.write("base.json", "{}");
  check_message(load_error(base, {"data.classes=" + nested("[", "]", 100000)}),
                {"--set \"data.classes=[[[", "...\": nested deeper than 64 levels"});
  check_message(load_error(base, {"data.classes=[{\"a\":1,\"a\":2}]"}),
                {"--set \"data.classes=[{\"a\":1,\"a\":2}]\": duplicate key \"[0].a\""});
  check_message(load_error(base, {"name=\xff\xfe"}), {"--set \"name=", "not valid UTF-8"});
  // A long value is cut in messages, a control character escaped.
  const std::string msg = load_error(base, {"optim.lr=" + std::string(5000, 'x') + "\n"});
  check_message(msg, {"--set \"optim.lr=xxx", "...\": optim.lr: expected a number"});
  check_message(load_error(base, {"bogus\n=1"}), {"--set \"bogus\\x0a=1\"", "unknown key \"bogus\\x0a\""});
  // Plain text still works for strings and JSON for the rest.
  const auto ok = load_config(base, {"name=[not json", "data.classes=[1,2]"});
  CHECK(ok["name"] == "[not json");
  CHECK(ok["data"]["classes"] == json::array({1, 2}));
}

TEST_CASE("json documents: nesting is counted outside strings, and a deep file is refused before anything recurses") {
  using accel::json_nesting_depth;
  CHECK(json_nesting_depth("{}") == 1);
  CHECK(json_nesting_depth(R"({"a": [1, {"b": [[]]}]})") == 5);
  CHECK(json_nesting_depth(R"({"a": "[[[[{{{{", "b": "\"[[["})") == 1);  // brackets in strings, escaped quotes
  CHECK(json_nesting_depth(std::string(100000, '[') + std::string(100000, ']')) == accel::kMaxJsonDepth + 1);
  const std::string ok = std::string(256, '[') + std::string(256, ']');
  CHECK(accel::parse_json_text(ok, "ok.json").is_array());
  const std::string deep = std::string(257, '[') + std::string(257, ']');
  CHECK_THROWS_WITH_AS(accel::parse_json_text(deep, "deep.json"), "deep.json: nested deeper than 256 levels",
                       accel::ConfigError);
  CHECK(accel::parse_json_or_discarded(deep).is_discarded());
  CHECK_THROWS_WITH_AS(accel::parse_json_text("{", "bad.json"), doctest::Contains("bad.json: not JSON: "),
                       accel::ConfigError);
}

TEST_CASE("json documents: text from a file is valid UTF-8 without controls or noncharacters, cut with an ellipsis") {
  using accel::clean_text;
  CHECK(clean_text("plain text, ünïcödé, 日本") == "plain text, ünïcödé, 日本");
  CHECK(clean_text("a\x1b[2Jb\tc\nd\x7f" "e\xc2\x9b" "f") == "a [2Jb c d e f");
  CHECK(clean_text("a\tb\nc\rd", std::string::npos, /*keep_lines=*/true) == "a\tb\nc d");
  const std::string rep = "\xef\xbf\xbd";
  CHECK(clean_text("x\xff y") == "x" + rep + " y");                       // not UTF-8 at all
  CHECK(clean_text("\xc0\xaf") == rep + rep);                              // overlong '/'
  CHECK(clean_text("\xed\xa0\x80") == rep + rep + rep);                    // a surrogate
  CHECK(clean_text("\xe2\x82") == rep + rep);                              // cut short
  CHECK(clean_text("\xef\xbf\xbe|\xef\xbf\xbf|\xf0\x9f\xbf\xbf") == rep + "|" + rep + "|" + rep);  // noncharacters
  CHECK(clean_text("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");             // an emoji stays
  CHECK(clean_text(std::string(10, 'a'), 4) == "aaaa\xe2\x80\xa6");
  CHECK(clean_text("ab\xc3\xa9", 3) == "ab\xe2\x80\xa6");                  // never half a character
  accel::Json doc = {{"k\x1b", {"v\x07", 1}}, {"ok", "fine"}};
  accel::clean_strings(doc);
  CHECK(doc == accel::Json{{"k ", {"v ", 1}}, {"ok", "fine"}});
}
