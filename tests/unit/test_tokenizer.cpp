// The WordPiece tokenizer against Hugging Face tokenizers' own ids (a fixture
// made by tests/reference/hf_tokenizer_ids.py with the installed
// all-MiniLM-L6-v2 tokenizer.json), stage by stage, and fuzzed bytes.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/data/catalog.h"
#include "accel/text/bpe.h"
#include "accel/text/tokenizer.h"
#include "accel/util/errors.h"
#include "support/gguf_builder.h"
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

// ---- byte-level BPE -------------------------------------------------------------------------

namespace {

// The installed SmolLM2 GGUF's tokenizer (scripts/setup.sh); the fixture's ids were made with it.
const ByteLevelBpe& smollm2_bpe() {
  static const std::unique_ptr<ByteLevelBpe> t = [] {
    const auto path = accel::data::default_vocab("gguf-bpe");
    REQUIRE_MESSAGE(fs::exists(path), path.string() << " missing: run scripts/setup.sh");
    return gguf_bpe(path);
  }();
  return *t;
}

std::vector<std::string> pieces(std::u32string_view text, BpePre pre) {
  std::vector<std::string> out;
  for (const auto& p : bpe_pre_tokenize(text, pre)) out.push_back(encode_utf8(p));
  return out;
}

// A toy vocabulary: the 256 byte characters, then what the merges make.
BpeVocabulary toy_bpe(std::vector<std::string> merges, std::vector<std::string> extra = {}) {
  BpeVocabulary v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(encode_utf8(std::u32string(1, bpe_byte_char(uint8_t(b)))));
  for (const auto& m : merges) {
    const auto sp = m.find(' ');
    v.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  for (const auto& e : extra) v.tokens.push_back(e);
  v.merges = std::move(merges);
  return v;
}

}  // namespace

TEST_CASE("bpe: ids equal Hugging Face tokenizers' for SmolLM2's own tokens and merges, and decode back to the text") {
  std::ifstream in(std::string(ACCEL_SOURCE_DIR) + "/tests/data/bpe_cases.json");
  REQUIRE(in.good());
  const auto fixture = nlohmann::json::parse(in);
  const auto& tok = smollm2_bpe();
  CHECK(file_sha256(accel::data::default_vocab("gguf-bpe")) == fixture["gguf_sha256"]);
  CHECK(tok.vocab_size() == 49152);
  CHECK(tok.pad_id() == 2);  // tokenizer.ggml.padding_token_id, <|im_end|>
  CHECK(tok.label() == "byte-level bpe (smollm) of SmolLM2-135M-Instruct.Q4_1.gguf");
  int compared = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"];
    INFO("text: " << nlohmann::json(text).dump());
    const auto want = c["ids"].get<std::vector<int32_t>>();
    CHECK(tok.tokenize(text) == want);
    if (c["decodes"]) CHECK(tok.decode(want) == text);
    auto with_end = want;
    with_end.push_back(0);  // <|endoftext|> ends every document
    CHECK(tok.encode(text) == with_end);
    ++compared;
  }
  CHECK(compared >= 40);
}

TEST_CASE("bpe: random texts of letters, digits, spaces, CJK and emoji decode back whole, and a long unbroken word tokenizes") {
  const auto& tok = smollm2_bpe();
  const std::vector<std::u32string> pool = {U"a", U"Z", U"e", U"'", U"'s", U" ", U"  ", U"\n", U"\t", U"7", U"0",
                                            U".", U",", U"!", U"\u00e9", U"\u00df", U"\u4e2d", U"\u6587", U"\U0001F600",
                                            U"\u0394", U"<|im_end|>", U"<|im", U"\u00a0", U"-", U"$"};
  std::mt19937 rng(20261207);
  for (int i = 0; i < 300; ++i) {
    std::u32string text;
    for (int k = int(rng() % 40); k > 0; --k) text += pool[rng() % pool.size()];
    const std::string utf8 = encode_utf8(text);
    INFO("text: " << nlohmann::json(utf8).dump());
    const auto ids = tok.tokenize(utf8);
    for (auto id : ids) CHECK((id >= 0 && id < tok.vocab_size()));
    CHECK(tok.decode(ids) == utf8);
  }
  // One piece of 200,000 letters: the merges are a queue, not a rescan per merge.
  const std::string word(200000, 'a');
  const auto ids = tok.tokenize(word);
  CHECK(tok.decode(ids) == word);
  CHECK(ids.size() <= word.size() / 4);  // "aaaa" is a token
}

TEST_CASE("bpe: the pre-tokenizer splits as GPT-2's pattern and, for smollm, isolates every digit") {
  using V = std::vector<std::string>;
  CHECK(pieces(U"Hello, world!", BpePre::Gpt2) == V{"Hello", ",", " world", "!"});
  CHECK(pieces(U"don't we'll 'Re", BpePre::Gpt2) == V{"don", "'t", " we", "'ll", " '", "Re"});
  // A run of spaces gives its last one to the word after it; a run at the end stays whole.
  CHECK(pieces(U"a   b  ", BpePre::Gpt2) == V{"a", "  ", " b", "  "});
  CHECK(pieces(U"x\n\ny", BpePre::Gpt2) == V{"x", "\n", "\n", "y"});
  CHECK(pieces(U"x \n y", BpePre::Gpt2) == V{"x", " \n", " y"});
  CHECK(pieces(U"year 2024!", BpePre::Gpt2) == V{"year", " 2024", "!"});
  CHECK(pieces(U"year 2024!", BpePre::Smollm) == V{"year", " ", "2", "0", "2", "4", "!"});
  CHECK(pieces(U"caf\u00e9 \u00bd\u4e2d", BpePre::Smollm) == V{"caf\u00e9", " ", "\u00bd", "\u4e2d"});
  CHECK(pieces(U"", BpePre::Smollm).empty());
  // The pieces always put the text back together.
  const std::u32string mixed = U"  It's 3.14\t\t-- na\u00efve \U0001F600!!\n";
  std::string joined;
  for (const auto& p : pieces(mixed, BpePre::Smollm)) joined += p;
  CHECK(joined == encode_utf8(mixed));
}

TEST_CASE("bpe: bytes map to GPT-2's printable characters and merges go lowest rank first, leftmost first") {
  CHECK(bpe_byte_char(' ') == U'\u0120');
  CHECK(bpe_byte_char('\n') == U'\u010a');
  CHECK(bpe_byte_char('a') == U'a');
  CHECK(bpe_byte_char(0xAD) == U'\u0143');  // the soft hyphen, the last of the 68 remapped bytes
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) seen.insert(bpe_byte_char(uint8_t(b)));
  CHECK(seen.size() == 256);
  // "b c" outranks "a b": "abc" is a + bc, not ab + c; "a a" merges from the left.
  const ByteLevelBpe tok(toy_bpe({"b c", "a b", "a a"}));
  const auto id = [&](const std::string& t) {
    for (int32_t i = 0; i < tok.vocab_size(); ++i)
      if (tok.decode({i}) == t) return i;
    return -1;
  };
  CHECK(tok.tokenize("abc") == std::vector<int32_t>{'a', id("bc")});
  CHECK(tok.tokenize("aaa") == std::vector<int32_t>{id("aa"), 'a'});
  CHECK(tok.tokenize(" ") == std::vector<int32_t>{32});  // the toy's id b is byte b's character
  // No end-of-text token: encode is tokenize; truncation cuts.
  auto ids = tok.encode("abcabc");
  CHECK(ids == std::vector<int32_t>{'a', id("bc"), 'a', id("bc")});
  tok.truncate(ids, 3);
  CHECK(ids == std::vector<int32_t>{'a', id("bc"), 'a'});
}

TEST_CASE("bpe: special tokens match as written, end every document, and survive truncation") {
  auto v = toy_bpe({"a b"}, {"<|endoftext|>", "<|im_start|>", "<|im"});
  v.specials = {"<|im", "<|im_start|>", "<|endoftext|>"};
  v.end_of_text = 257;  // ids: 256 "ab", 257 <|endoftext|>, 258 <|im_start|>, 259 <|im
  const ByteLevelBpe tok(v);
  CHECK(tok.tokenize("ab<|im_start|>ab") == std::vector<int32_t>{256, 258, 256});  // the longest special wins
  CHECK(tok.tokenize("<|im|>") == std::vector<int32_t>{259, '|', '>'});
  CHECK(tok.encode("ab") == std::vector<int32_t>{256, 257});
  CHECK(tok.pad_id() == 257);  // no padding id: the end-of-text one
  auto ids = tok.encode("abababab");
  tok.truncate(ids, 3);
  CHECK(ids == std::vector<int32_t>{256, 256, 257});
  CHECK(tok.decode({258, 256}) == "<|im_start|>ab");
}

TEST_CASE("bpe: a byte without a token is left out, and a malformed vocabulary or a file without a tokenizer is refused naming it") {
  // A byte without a token is left out, and its neighbours merge across it.
  auto v = toy_bpe({"a b"});
  v.tokens['z'] = "unused";
  CHECK(ByteLevelBpe{v}.tokenize("azb") == std::vector<int32_t>{256});
  auto m = toy_bpe({"a b"});
  m.merges.push_back("ab");
  CHECK_THROWS_WITH_AS(ByteLevelBpe{m}, doctest::Contains("merge 1 \"ab\" is not two tokens"), std::invalid_argument);
  auto x = toy_bpe({"a b"});
  x.merges.push_back("q r");
  CHECK_THROWS_WITH_AS(ByteLevelBpe{x}, doctest::Contains("names a token the vocabulary lacks"), std::invalid_argument);
  auto s = toy_bpe({"a b"});
  s.specials = {"<nope>"};
  CHECK_THROWS_AS(ByteLevelBpe{s}, std::invalid_argument);
  auto twice = toy_bpe({"a b"});
  twice.merges.push_back("a b");
  CHECK_THROWS_WITH_AS(ByteLevelBpe{twice}, doctest::Contains("merge 1 \"a b\" is given twice"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ByteLevelBpe{BpeVocabulary{}}, doctest::Contains("no tokens"), std::invalid_argument);
}

TEST_CASE("bpe: a GGUF's tokenizer is read from its metadata, and one malformed or of another kind is a ConfigError naming the file") {
  accel_test::TempDir dir;
  // A toy tokenizer as a GGUF carries one: the byte characters, "ab", <|endoftext|> (control).
  const auto v = toy_bpe({"a b"}, {"<|endoftext|>"});
  std::vector<int32_t> types(v.tokens.size(), 1);
  types.back() = 3;
  auto toy = [&](const std::string& model, const std::string& pre, std::vector<std::string> merges,
                 std::vector<int32_t> kinds) {
    accel_test::GgufBuilder b;
    b.kv_str("general.architecture", "llama").kv_str("tokenizer.ggml.model", model).kv_str("tokenizer.ggml.pre", pre);
    b.kv_strings("tokenizer.ggml.tokens", v.tokens).kv_strings("tokenizer.ggml.merges", merges);
    b.kv_i32s("tokenizer.ggml.token_type", kinds);
    return b;
  };
  const auto good = dir.write("toy.gguf", toy("gpt2", "smollm", v.merges, types).bytes());
  const auto tok = gguf_bpe(good);
  CHECK(tok->encode("ab1<|endoftext|>") == std::vector<int32_t>{256, '1', 257, 257});  // its own end-of-text after
  CHECK(tok->label() == "byte-level bpe (smollm) of toy.gguf");
  // A file whose add_bos_token is true gets its BOS first.
  auto bos = toy("gpt2", "gpt-2", v.merges, types);
  bos.kv_bool("tokenizer.ggml.add_bos_token", true).kv_u32("tokenizer.ggml.bos_token_id", 257);
  CHECK(gguf_bpe(dir.write("bos.gguf", bos.bytes()))->encode("ab") == std::vector<int32_t>{257, 256, 257});
  auto no_bos = toy("gpt2", "gpt-2", v.merges, types);
  no_bos.kv_bool("tokenizer.ggml.add_bos_token", true);
  CHECK_THROWS_WITH_AS(gguf_bpe(dir.write("no-bos.gguf", no_bos.bytes())), doctest::Contains("names no bos_token_id"),
                       accel::ConfigError);
  const auto error = [&](const std::string& name, const accel_test::GgufBuilder& b) {
    try {
      gguf_bpe(dir.write(name, b.bytes()));
      return std::string("no error");
    } catch (const accel::ConfigError& e) {
      return std::string(e.what());
    }
  };
  CHECK_MESSAGE(error("spm.gguf", toy("llama", "default", v.merges, types)).find(
                    "spm.gguf: gguf tokenizer: tokenizer.ggml.model \"llama\" is not read") != std::string::npos,
                "SentencePiece's");
  CHECK(error("qwen.gguf", toy("gpt2", "qwen2", v.merges, types)).find("pre-tokenizer \"qwen2\"") != std::string::npos);
  CHECK(error("types.gguf", toy("gpt2", "smollm", v.merges, {1, 3})).find("token_type has 2 entries for 258 tokens") !=
        std::string::npos);
  CHECK(error("merge.gguf", toy("gpt2", "smollm", {"ab"}, types)).find("merge.gguf: bpe: merge 0 \"ab\" is not two tokens") !=
        std::string::npos);
  // A GGUF of metadata alone, without a tokenizer.
  accel_test::GgufBuilder bare;
  bare.kv_str("general.architecture", "llama");
  CHECK(error("no-tok.gguf", bare).find("no-tok.gguf: gguf tokenizer: the file carries no tokenizer") != std::string::npos);
  CHECK_THROWS_AS(gguf_bpe(dir / "missing.gguf"), accel::ConfigError);
}
