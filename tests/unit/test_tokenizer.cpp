// The WordPiece tokenizer against Hugging Face tokenizers' own ids (a fixture
// made by tests/reference/hf_tokenizer_ids.py with the installed
// all-MiniLM-L6-v2 tokenizer.json), stage by stage, and fuzzed bytes.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/data/catalog.h"
#include "accel/text/tokenizer.h"
#include "accel/util/errors.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace accel::text;
using namespace std::string_literals;

namespace {

// The installed vocab (scripts/setup.sh); the fixture's ids were made with it.
const Vocab& minilm_vocab() {
  static const Vocab v = [] {
    const auto path = accel::data::default_vocab();
    REQUIRE_MESSAGE(fs::exists(path), path.string() << " missing: run scripts/setup.sh");
    return Vocab::from_file(path);
  }();
  return v;
}

// A toy vocab with the four special tokens first.
Vocab toy_vocab(std::vector<std::string> extra) {
  std::vector<std::string> t = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  t.insert(t.end(), extra.begin(), extra.end());
  return Vocab::from_tokens(t);
}

std::string utf8(std::u32string_view s) { return encode_utf8(s); }

}  // namespace

TEST_CASE("tokenizer: ids equal Hugging Face tokenizers' on accents, CJK, punctuation, controls and long words") {
  std::ifstream in(std::string(ACCEL_SOURCE_DIR) + "/tests/data/tokenizer_cases.json");
  REQUIRE(in.good());
  const auto fixture = nlohmann::json::parse(in);
  const WordPieceTokenizer tok(minilm_vocab());
  int compared = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"];
    INFO("text: " << nlohmann::json(text).dump());
    CHECK(tok.encode(text, 0) == c["ids"].get<std::vector<int32_t>>());
    ++compared;
  }
  CHECK(compared >= 40);
}

TEST_CASE("tokenizer: the normalizer cleans, spaces CJK, strips accents and lowercases") {
  TokenizerOptions o;
  CHECK(utf8(normalize(U"Ca\u0301fe\u0301 \u00c5ngstr\u00f6m", o)) == "cafe angstrom");
  CHECK(utf8(normalize(U"a\u0000b\ufffdc\u200bd\u00ade\u0007f"s, o)) == "abcdef");  // NUL, U+FFFD, Cf, Cc
  CHECK(utf8(normalize(U"a\tb\nc\rd\u00a0e\u3000f", o)) == "a b c d e f");          // every space to ' '
  CHECK(utf8(normalize(U"\u4e2d\u6587x", o)) == " \u4e2d  \u6587 x");
  CHECK(utf8(normalize(U"\ue000", o)) == "");  // private use (Co) is dropped, as tokenizers' is_other
  TokenizerOptions cased;
  cased.lowercase = false;
  CHECK(utf8(normalize(U"Caf\u00e9", cased)) == "Caf\u00e9");
}

TEST_CASE("tokenizer: pre-tokenizer isolates every punctuation character and drops whitespace") {
  const auto words = pre_tokenize(U"don't!!  $5,-x\u00bfy");
  std::vector<std::string> got;
  for (const auto& w : words) got.push_back(utf8(w));
  CHECK(got == std::vector<std::string>{"don", "'", "t", "!", "!", "$", "5", ",", "-", "x", "\u00bf", "y"});
  CHECK(pre_tokenize(U"   ").empty());
}

TEST_CASE("tokenizer: wordpiece is greedy longest-first, unknown words and words over 100 chars are one [UNK]") {
  const Vocab v = toy_vocab({"un", "##aff", "##able", "aff", "a", "##a"});
  const int32_t un = *v.find("un"), aff = *v.find("##aff"), able = *v.find("##able");
  std::vector<int32_t> ids;
  wordpiece(U"unaffable", v, 100, ids);
  CHECK(ids == std::vector<int32_t>{un, aff, able});
  ids.clear();
  wordpiece(U"unaffablex", v, 100, ids);  // "x" has no piece: the whole word
  CHECK(ids == std::vector<int32_t>{v.unk_id()});
  ids.clear();
  wordpiece(std::u32string(100, U'a'), v, 100, ids);
  CHECK(ids.size() == 100);
  ids.clear();
  wordpiece(std::u32string(101, U'a'), v, 100, ids);
  CHECK(ids == std::vector<int32_t>{v.unk_id()});
}

TEST_CASE("tokenizer: encode adds [CLS] and [SEP], truncates to max_length and keeps empty lines") {
  const WordPieceTokenizer tok(minilm_vocab());
  const auto& v = tok.vocab();
  CHECK(tok.encode("", 0) == std::vector<int32_t>{v.cls_id(), v.sep_id()});
  const auto full = tok.encode("a gripping , funny and moving film", 0);
  const auto cut = tok.encode("a gripping , funny and moving film", 5);
  REQUIRE(cut.size() == 5);
  CHECK(std::vector<int32_t>(cut.begin(), cut.begin() + 4) == std::vector<int32_t>(full.begin(), full.begin() + 4));
  CHECK(cut.back() == v.sep_id());
  CHECK(tok.encode("[CLS] x [SEP]", 0) ==
        std::vector<int32_t>{v.cls_id(), v.cls_id(), *v.find("x"), v.sep_id(), v.sep_id()});
  CHECK_THROWS_AS(tok.encode("x", 1), std::invalid_argument);
  std::istringstream lines("first line\r\n\nthird\n");
  std::ostringstream out;
  CHECK(tokenize_lines(lines, out, tok, 0, "stdin") == 3);
  CHECK(out.str() == "101 2034 2240 102\n101 102\n101 2353 102\n");
}

TEST_CASE("tokenizer: a vocab without its special tokens, with bad UTF-8 or CRLF lines, is read or refused by line") {
  accel_test::TempDir dir;
  const auto crlf = dir.write("crlf.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nhello  \r\n");
  const auto v = Vocab::from_file(crlf);
  CHECK(v.size() == 5);
  CHECK(v.find("hello") == 4);  // trailing whitespace and CR are not part of a token
  CHECK(v.pad_id() == 0);
  const auto no_cls = dir.write("nocls.txt", "[PAD]\n[UNK]\n[SEP]\nx\n");
  try {
    Vocab::from_file(no_cls);
    FAIL("no error for a vocab without [CLS]");
  } catch (const accel::DataError& e) {
    CHECK(std::string(e.what()).find("nocls.txt") != std::string::npos);
    CHECK(std::string(e.what()).find("[CLS]") != std::string::npos);
  }
  const auto bad = dir.write("bad.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nok\n\xc3\x28\n");
  try {
    Vocab::from_file(bad);
    FAIL("no error for invalid UTF-8");
  } catch (const accel::DataError& e) {
    CHECK(std::string(e.what()).find("bad.txt:6: invalid UTF-8") != std::string::npos);
  }
  CHECK_THROWS_AS(Vocab::from_file(dir / "missing.txt"), accel::ConfigError);
  CHECK_THROWS_AS(Vocab::from_file(dir.write("empty.txt", "")), accel::DataError);
}

TEST_CASE("tokenizer: invalid UTF-8 is an error naming the byte, and fuzzed bytes never crash it") {
  const WordPieceTokenizer tok(minilm_vocab());
  for (const std::string bad : {std::string("\xff"), std::string("ok \xc0\xaf"),   // overlong '/'
                                std::string("\xed\xa0\x80"),                      // a surrogate
                                std::string("\xf4\x90\x80\x80"),                  // above U+10FFFF
                                std::string("cut \xe2\x82")}) {
    CHECK_THROWS_AS(tok.encode(bad, 0), Utf8Error);
  }
  try {
    tok.encode("abc\xfe", 0);
  } catch (const Utf8Error& e) {
    CHECK(e.offset() == 3);
  }
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 64);
  const std::string seed_text = "Caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 don't!! \xf0\x9f\x98\x80 x";
  int ok = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string s = seed_text;
    if (i % 3 == 0) {  // random bytes
      s.assign(size_t(len(rng)), '\0');
      for (auto& c : s) c = char(byte(rng));
    } else if (i % 3 == 1) {  // a valid text with a few bytes replaced
      for (int k = 0; k < 3; ++k) s[size_t(rng() % s.size())] = char(byte(rng));
    } else {  // random valid code points of every plane (controls, marks, CJK, private use)
      std::u32string cps;
      for (int k = len(rng); k > 0; --k) {
        char32_t c = char32_t(rng() % 0x110000);
        if (c >= 0xD800 && c <= 0xDFFF) c = U'x';
        cps.push_back(c);
      }
      s = encode_utf8(cps);
    }
    try {
      const auto ids = tok.encode(s, 32);
      CHECK(ids.size() <= 32);
      for (auto id : ids) CHECK((id >= 0 && id < tok.vocab().size()));
      ++ok;
    } catch (const Utf8Error&) {
      ++refused;
    }
  }
  MESSAGE("fuzz: " << ok << " tokenized, " << refused << " refused as invalid UTF-8");
  CHECK(ok > 0);
  CHECK(refused > 0);
}

TEST_CASE("tokenizer: sha256 of a file is the standard digest") {
  accel_test::TempDir dir;
  CHECK(file_sha256(dir.write("abc.txt", "abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
