// A deterministic mutation fuzz of the config loader, as the safetensors
// reader has: the shipped configs, mutated (bit flips, truncation, syntax
// characters, deep nesting, repeated keys, huge numbers, splices), must load
// or be refused with a one-line ConfigError; never a crash, never another
// exception. A fixed seed and count keep it reproducible and about a second.
#include <doctest/doctest.h>

#include "support/temp_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "accel/config/run_config.h"
#include "accel/util/errors.h"

namespace {

namespace fs = std::filesystem;
using accel_test::TempDir;

struct Seed {
  fs::path dir;  // the copy's folder, so "extends" resolves
  std::string text;
};

std::vector<Seed> copy_seeds(const TempDir& tmp) {
  const fs::path src = fs::path(ACCEL_SOURCE_DIR) / "configs";
  fs::copy(src, tmp.path, fs::copy_options::recursive);
  std::vector<Seed> seeds;
  for (const auto& e : fs::recursive_directory_iterator(tmp.path)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    seeds.push_back({e.path().parent_path(), ss.str()});
  }
  std::sort(seeds.begin(), seeds.end(), [](const Seed& a, const Seed& b) { return a.text < b.text; });
  return seeds;
}

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  size_t pick(size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>(lo, hi)(rng_); }

  std::string mutate(std::string t, const std::string& other, int kind) {
    if (t.empty()) return t;
    switch (kind) {
      case 0:  // bit flips
        for (size_t k = 0, n = pick(1, 3); k < n; ++k) t[pick(0, t.size() - 1)] ^= char(1 << pick(0, 7));
        return t;
      case 1:  // truncation
        return t.substr(0, pick(0, t.size() - 1));
      case 2: {  // a syntax character, put in or put over
        static const std::string chars = "\"{}[]:,\\-+.eE0 9\x01\xff\x7f";
        const char c = chars[pick(0, chars.size() - 1)];
        const size_t at = pick(0, t.size() - 1);
        if (pick(0, 1) == 0) t[at] = c; else t.insert(at, 1, c);
        return t;
      }
      case 3: {  // a value wrapped in lists or objects, sometimes far too deep
        const size_t colon = t.find(':', pick(0, t.size() - 1));
        if (colon == std::string::npos) return t;
        const size_t end = t.find_first_of(",}", colon);
        const size_t depth = pick(0, 3) == 0 ? pick(60, 5000) : pick(1, 4);
        const bool object = pick(0, 1) == 0;
        std::string open, close;
        for (size_t k = 0; k < depth; ++k) {
          open += object ? "{\"k\":" : "[";
          close += object ? "}" : "]";
        }
        if (end != std::string::npos) t.insert(end, close);
        t.insert(colon + 1, open);
        return t;
      }
      case 4: {  // a key repeated in its own object
        const size_t q = t.find("\":", pick(0, t.size() - 1));
        if (q == std::string::npos) return t;
        const size_t start = t.rfind('"', q - 1);
        if (start == std::string::npos) return t;
        t.insert(start, t.substr(start, q + 2 - start) + (pick(0, 1) ? "0, " : "{}, "));
        return t;
      }
      case 5: {  // a number far out of range, or not JSON at all
        static const char* numbers[] = {"1e999", "-1e400", "1e-400", "123456789012345678901234567890",
                                        "9223372036854775808", "-9223372036854775809",
                                        "18446744073709551616", "4294967296", "2147483648",
                                        "-0", "NaN", "Infinity", "0x10", "1.7976931348623157e308"};
        const size_t at = t.find_first_of("0123456789", pick(0, t.size() - 1));
        if (at == std::string::npos) return t;
        const size_t end = t.find_first_not_of("0123456789.eE-+", at);
        t.replace(at, (end == std::string::npos ? t.size() : end) - at, numbers[pick(0, 13)]);
        return t;
      }
      default: {  // a piece of another config spliced in
        const size_t from = pick(0, other.size() - 1);
        t.insert(pick(0, t.size() - 1), other.substr(from, pick(1, 80)));
        return t;
      }
    }
  }

 private:
  std::mt19937 rng_;
};

}  // namespace

TEST_CASE("config fuzz: mutated configs load or fail with a one-line ConfigError" * doctest::test_suite("process")) {
  TempDir tmp;
  const auto seeds = copy_seeds(tmp);
  REQUIRE(seeds.size() >= 5);
  Mutator m(20260101);
  int loaded = 0, refused = 0;
  constexpr int kRounds = 3000;
  for (int i = 0; i < kRounds; ++i) {
    const Seed& s = seeds[m.pick(0, seeds.size() - 1)];
    std::string text = m.mutate(s.text, seeds[m.pick(0, seeds.size() - 1)].text, i % 7);
    if (i % 5 == 0) text = m.mutate(text, s.text, int(m.pick(0, 6)));  // sometimes two at once
    const fs::path file = s.dir / "fuzz.json";
    { std::ofstream(file, std::ios::binary) << text; }
    try {
      const auto resolved = accel::config::load_config(file);
      (void)accel::config::to_run_config(resolved);
      (void)resolved.dump();
      ++loaded;
    } catch (const accel::ConfigError& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find('\n') == std::string::npos, "round ", i, ": ", msg);
      CHECK_MESSAGE(msg.size() < 1000, "round ", i, ": ", msg.substr(0, 300));
      CHECK_MESSAGE(msg.find(".json") != std::string::npos, "round ", i, ": no file named: ", msg);
      ++refused;
    } catch (const std::exception& e) {
      FAIL_CHECK("round " << i << ": not a ConfigError: " << e.what() << "\ninput: " << text.substr(0, 400));
    }
  }
  MESSAGE("config fuzz: " << loaded << " loaded, " << refused << " refused");
  CHECK(loaded + refused == kRounds);
  CHECK(loaded > 0);
  CHECK(refused > 0);
}
