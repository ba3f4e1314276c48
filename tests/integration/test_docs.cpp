// The documentation a newcomer follows: every relative link in README.md,
// CONTRIBUTING.md, docs/ and results/README.md resolves (the file, and a
// heading for an anchor); every scripts/ and bench/ path it names exists;
// every `accel-bench SUBCOMMAND --flag` it shows names a subcommand whose
// --help lists that flag. And the product speaks of itself: nowhere in the
// tree a word about how it is being made.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "integration/cli_helpers.h"
#include "support/read_text.h"

namespace fs = std::filesystem;
using namespace cli_test;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<fs::path> doc_files() {
  std::vector<fs::path> files = {source("README.md"), source("CONTRIBUTING.md"), source("results/README.md")};
  for (const auto& e : fs::directory_iterator(source("docs"))) {
    if (e.path().extension() == ".md") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// GitHub's anchor of a heading: lower case, punctuation other than '-' and
// '_' dropped, spaces as '-'; a repeated one gets -1, -2, ...
std::set<std::string> anchors_of(const fs::path& md) {
  std::set<std::string> out;
  std::map<std::string, int> seen;
  bool fenced = false;
  for (const auto& l : lines_of(accel_test::read_text(md))) {
    if (l.rfind("```", 0) == 0) fenced = !fenced;
    if (fenced || l.empty() || l[0] != '#') continue;
    const auto start = l.find_first_not_of('#');
    if (start == std::string::npos || l[start] != ' ') continue;
    std::string slug;
    for (size_t i = start + 1; i < l.size(); ++i) {
      const auto c = static_cast<unsigned char>(l[i]);
      if (std::isalnum(c) || c == '-' || c == '_' || c >= 0x80) {
        slug += char(std::tolower(c));
      } else if (c == ' ') {
        slug += '-';
      }
    }
    const int n = seen[slug]++;
    out.insert(n == 0 ? slug : slug + "-" + std::to_string(n));
  }
  return out;
}

// What a reader is shown as code: the text of inline `spans` and the lines
// of fenced blocks.
std::vector<std::string> code_of(const fs::path& md) {
  std::vector<std::string> out;
  bool fenced = false;
  for (const auto& l : lines_of(accel_test::read_text(md))) {
    if (l.rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced) {
      out.push_back(l);
      continue;
    }
    for (size_t a = l.find('`'); a != std::string::npos;) {
      const size_t b = l.find('`', a + 1);
      if (b == std::string::npos) break;
      out.push_back(l.substr(a + 1, b - a - 1));
      a = l.find('`', b + 1);
    }
  }
  return out;
}

std::vector<std::string> words_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::map<std::string, std::string> g_help;  // "sub" or "sub subsub" -> its --help
const std::string& help_of(const std::string& command) {
  auto it = g_help.find(command);
  if (it == g_help.end()) it = g_help.emplace(command, run_cli(command + " --help").output).first;
  return it->second;
}

bool lists_word(const std::string& help, const std::string& word) {
  for (size_t at = help.find(word); at != std::string::npos; at = help.find(word, at + 1)) {
    const size_t end = at + word.size();
    const bool before = at == 0 || !std::isalnum(static_cast<unsigned char>(help[at - 1])) ;
    const bool after = end >= help.size() || !(std::isalnum(static_cast<unsigned char>(help[end])) || help[end] == '-');
    if (before && after) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("docs: every relative link resolves, to its file and its heading") {
  for (const auto& md : doc_files()) {
    REQUIRE_MESSAGE(fs::exists(md), md.string());
    const auto text = accel_test::read_text(md);
    bool fenced = false;
    for (const auto& l : lines_of(text)) {
      if (l.rfind("```", 0) == 0) fenced = !fenced;
      if (fenced) continue;
      for (size_t at = l.find("]("); at != std::string::npos; at = l.find("](", at + 2)) {
        const size_t end = l.find(')', at + 2);
        if (end == std::string::npos) break;
        std::string target = l.substr(at + 2, end - at - 2);
        if (const auto sp = target.find(' '); sp != std::string::npos) target = target.substr(0, sp);  // a title
        if (target.empty() || target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
        INFO(md.string() << ": " << target);
        const auto hash = target.find('#');
        const std::string path = target.substr(0, hash);
        const fs::path file = path.empty() ? md : md.parent_path() / path;
        CHECK(fs::exists(file));
        if (hash != std::string::npos && fs::exists(file) && file.extension() == ".md") {
          CHECK(anchors_of(file).count(target.substr(hash + 1)) == 1);
        }
      }
    }
  }
}

TEST_CASE("docs: every script and every accel-bench subcommand and flag shown exists") {
  const std::string top = help_of("");
  std::set<std::string> subcommands;
  {
    bool in = false;
    for (const auto& l : lines_of(top)) {
      if (l.rfind("Subcommands:", 0) == 0) in = true;
      else if (in && l.size() > 2 && l[0] == ' ' && l[1] == ' ' && l[2] != ' ') subcommands.insert(words_of(l)[0]);
    }
  }
  REQUIRE(subcommands.count("run") == 1);
  int commands = 0;
  for (const auto& md : doc_files()) {
    for (const auto& code : code_of(md)) {
      const auto w = words_of(code);
      for (size_t i = 0; i < w.size(); ++i) {
        // Paths of the project's scripts.
        for (const char* dir : {"scripts/", "bench/"}) {
          const auto at = w[i].find(dir);
          if (at == std::string::npos || (at > 0 && w[i][at - 1] != '/' && w[i][at - 1] != '(')) continue;
          std::string p = w[i].substr(at);
          while (!p.empty() && std::string(".,;:)'\"`").find(p.back()) != std::string::npos) p.pop_back();
          if (p.find('<') != std::string::npos || p.find('*') != std::string::npos || p.find('$') != std::string::npos) continue;
          if (p.size() > 3 && (p.substr(p.size() - 3) == ".sh" || p.substr(p.size() - 3) == ".py")) {
            INFO(md.string() << ": " << code);
            CHECK_MESSAGE(fs::exists(source(p)), p);
          }
        }
        // accel-bench SUBCOMMAND [SUB] --flag ...
        const std::string& t = w[i];
        const bool exe = t == "accel-bench" || (t.size() > 12 && t.compare(t.size() - 12, 12, "/accel-bench") == 0);
        if (!exe || i + 1 >= w.size()) continue;
        const std::string sub = w[i + 1];
        if (subcommands.count(sub) == 0) {
          // A word after the name in prose ("the accel-bench CLI") is no command.
          const bool looks_like_one = !sub.empty() && std::islower(static_cast<unsigned char>(sub[0])) &&  // not --version
                                      sub.find_first_not_of("abcdefghijklmnopqrstuvwxyz-") == std::string::npos &&
                                      w.size() > i + 2;
          INFO(md.string() << ": " << code);
          CHECK_MESSAGE(!looks_like_one, ("no subcommand \"" + sub + "\""));
          continue;
        }
        ++commands;
        std::string command = sub;
        if (i + 2 < w.size() && lists_word(help_of(sub), w[i + 2]) &&
            help_of(sub).find("Subcommands:") != std::string::npos &&
            w[i + 2].find_first_not_of("abcdefghijklmnopqrstuvwxyz-") == std::string::npos) {
          command += " " + w[i + 2];
        }
        // A sub-subcommand also takes its parent's options (history --db).
        const std::string help = help_of(command) + (command == sub ? "" : help_of(sub));
        for (size_t k = i + 2; k < w.size(); ++k) {
          const std::string& f = w[k];
          if (f == "|" || f == ";" || f == "&&" || f == "||" || f == "#" || f[0] == '>' || f == "\\") break;
          if (f.rfind("--", 0) != 0 || f.size() < 3) continue;
          std::string flag = f.substr(0, f.find('='));
          while (!flag.empty() && std::string(".,;:)'\"`").find(flag.back()) != std::string::npos) flag.pop_back();
          INFO(md.string() << ": " << code);
          CHECK_MESSAGE(lists_word(help, flag), ("accel-bench " + command + " has no " + flag));
        }
      }
    }
  }
  CHECK(commands > 20);  // the docs show the commands, so the check checked something
}

TEST_CASE("docs: the product speaks of itself, with no word about how it is being made anywhere in the tree") {
  // Phrases that speak of how the product is being made, not of the
  // product; matched as whole words, case-insensitive. Spelt in pieces, so
  // that this file, searched like every other, is no match of its own list.
  const std::vector<std::string> words = {"issue", "stop", "ses" "sion", "ses" "sions", "go" "al", "go" "als",
                                          "work" "place", "work" " item", "this" " vm", "the intel" " vm"};
  std::vector<fs::path> files;
  for (const char* root : {"README.md", "CONTRIBUTING.md", "CMakeLists.txt"}) files.push_back(source(root));
  for (const char* dir : {"apps", "lib", "tests", "bench", "scripts", "configs", "docs", "results", ".github", ".ci"}) {
    if (!fs::exists(source(dir))) continue;
    for (const auto& e : fs::recursive_directory_iterator(source(dir))) {
      if (!e.is_regular_file()) continue;
      const auto ext = e.path().extension().string();
      static const std::set<std::string> text = {".cpp", ".h", ".inc", ".cmake", ".txt", ".md", ".sh",
                                                 ".py", ".json", ".yml", ".yaml", ".csv", ""};
      if (text.count(ext) == 0 || e.file_size() > 4'000'000) continue;
      files.push_back(e.path());
    }
  }
  int found = 0;
  for (const auto& f : files) {
    const auto ls = lines_of(accel_test::read_text(f));
    for (size_t n = 0; n < ls.size(); ++n) {
      std::string low = ls[n];
      for (auto& c : low) c = char(std::tolower(static_cast<unsigned char>(c)));
      for (const auto& w : words) {
        for (size_t at = low.find(w); at != std::string::npos; at = low.find(w, at + 1)) {
          const size_t end = at + w.size();
          const bool before = at == 0 || !std::isalnum(static_cast<unsigned char>(low[at - 1]));
          const bool after = end >= low.size() || !std::isalnum(static_cast<unsigned char>(low[end]));
          if (!before || !after) continue;
          // "issue" and "stop" as ordinary words ("an open issue", "the run
          // stops") are fine; a ticket's number after them is not.
          if (w == "issue" || w == "stop") {
            size_t d = end;
            while (d < low.size() && (low[d] == ' ' || low[d] == '#')) ++d;
            if (d == end || d >= low.size() || !std::isdigit(static_cast<unsigned char>(low[d]))) continue;
            // Another project's issue, cited as a source ("NVIDIA/nccl-tests issue #119"), is a citation.
            size_t p = at;
            while (p > 0 && low[p - 1] == ' ') --p;
            const size_t q = low.find_last_of(" \"(", p == 0 ? 0 : p - 1);
            const std::string before = low.substr(q == std::string::npos ? 0 : q + 1, p - (q == std::string::npos ? 0 : q + 1));
            if (before.find('/') != std::string::npos) continue;
          }
          ++found;
          MESSAGE(f.string() << ":" << n + 1 << ": \"" << w << "\" in: " << ls[n].substr(0, 160));
        }
      }
    }
  }
  CHECK(found == 0);
}

TEST_CASE("source: nlohmann/json is included only through accel/util/json.h, where a read of a missing key throws") {
  int direct = 0, files = 0;
  for (const char* dir : {"apps", "lib", "tests", "bench"}) {
    if (!fs::exists(source(dir))) continue;
    for (const auto& e : fs::recursive_directory_iterator(source(dir))) {
      const auto ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".inc")) continue;
      if (e.path().filename() == "json.h" && e.path().parent_path().filename() == "util") continue;
      ++files;
      const auto ls = lines_of(accel_test::read_text(e.path()));
      for (size_t n = 0; n < ls.size(); ++n) {
        if (ls[n].rfind("#include", 0) == 0 && ls[n].find("nlohmann/") != std::string::npos) {
          ++direct;
          MESSAGE(e.path().string() << ":" << n + 1 << ": " << ls[n] << " (include \"accel/util/json.h\")");
        }
      }
    }
  }
  CHECK(files > 100);
  CHECK(direct == 0);
}


TEST_CASE("gpu-check: every package the build looks up is one the GPU check provides, and a new one fails it") {
  const std::string script = "bash '" + source("scripts/gpu-check.sh") + "'";
  const auto ok = run_command("cd '" + source("") + "' && " + script + " --check-deps");
  INFO(ok.output);
  CHECK(ok.code == 0);
  for (const char* dep : {"SQLite3: libsqlite3-dev,libsqlite3-0", "Boost: libboost1.74-dev",
                          "UTF8PROC_LIBRARY: libutf8proc-dev", "doctest: doctest-dev"}) {
    CHECK_MESSAGE(ok.output.find(dep) != std::string::npos, dep);
  }
  // The build gains a lookup the script does not know: the check fails, naming it.
  {
    const auto dir = fresh_dir("gpu-deps");
    fs::create_directories(dir);
    std::ofstream(dir / "CMakeLists.txt")
        << accel_test::read_text(source("CMakeLists.txt")) << "\nfind_package(Frobnicate 2 REQUIRED)  # new\n";
    std::ofstream(dir / "extra.cmake") << "# find_package(InAComment)\nfind_library(FOO_LIBRARY foo)\n";
    const auto bad = run_command("cd '" + source("") + "' && " + script + " --check-deps '" +
                               (dir / "CMakeLists.txt").string() + "' '" + (dir / "extra.cmake").string() + "'");
    INFO(bad.output);
    CHECK(bad.code == 1);
    CHECK(bad.output.find("looks up Frobnicate, which gpu-check.sh does not know how to provide") != std::string::npos);
    CHECK(bad.output.find("looks up FOO_LIBRARY") != std::string::npos);
    CHECK(bad.output.find("InAComment") == std::string::npos);
    fs::remove_all(dir);
  }
  // The probe, which decides what must come from the .debs, looks each one up.
  const std::string text = accel_test::read_text(source("scripts/gpu-check.sh"));
  const auto at = text.find("\nDEPS=(");
  REQUIRE(at != std::string::npos);
  std::istringstream deps(text.substr(at + 7, text.find(')', at) - at - 7));
  auto upper = [](std::string w) {
    for (auto& c : w) c = char(std::toupper(static_cast<unsigned char>(c)));
    return w;
  };
  int n = 0;
  for (std::string d; deps >> d; ++n) {
    const bool probed = text.find("find_package(" + d + " ") != std::string::npos ||
                        text.find("find_package(" + d + ")") != std::string::npos ||
                        text.find("find_library(" + upper(d) + "_LIBRARY") != std::string::npos;
    CHECK_MESSAGE(probed, "the probe does not look up " << d);
  }
  CHECK(n >= 9);
}

TEST_CASE("gpu-check: no file name becomes code, and the modes that build nothing read every file named") {
  const std::string script = "bash '" + source("scripts/gpu-check.sh") + "'";
  const auto dir = fresh_dir("gpu-names");
  fs::create_directories(dir);
  // A name that a sed script built from it would run (the `e` flag after a
  // '|'), and a name whose '|' would end such a script before the file is read.
  const std::string runs = "a;touch $ACCEL_MARK;x|e\n#.cmake", cuts = "b|c.cmake";
  std::ofstream(dir / runs) << "find_package(Frobnicate)\n";
  std::ofstream(dir / cuts) << "find_package(Frobnicate2 REQUIRED)\n";
  const auto mark = dir / "PWNED";
  const auto r = run_command("cd '" + dir.string() + "' && ACCEL_MARK='" + mark.string() + "' " + script +
                           " --check-deps '" + runs + "' '" + (dir / cuts).string() + "'");
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK_FALSE(fs::exists(mark));
  CHECK(r.output.find("looks up Frobnicate, which") != std::string::npos);
  CHECK(r.output.find("looks up Frobnicate2, which") != std::string::npos);
  // The name is shown quoted: its newline starts no line of its own.
  CHECK(r.output.find("\n#.cmake") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("gpu-check: --help anywhere helps, an unknown argument stops it before anything runs, and --out is never written through a link") {
  const std::string script = "bash '" + source("scripts/gpu-check.sh") + "'";
  const auto dir = fresh_dir("gpu-out");
  fs::create_directories(dir);
  // A python without torch: the check stops at its preflight, having built nothing.
  const std::string env = "ACCEL_PYTHON=/bin/false BUILD_DIR='" + (dir / "build").string() + "' ";
  auto r = run_command(env + script + " --out '" + (dir / "o1").string() + "' --help");
  CHECK(r.code == 0);
  CHECK(r.output.find("The GPU check") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "o1"));
  r = run_command(env + script + " --out '" + (dir / "o2").string() + "' --bogus");
  CHECK(r.code == 1);
  CHECK(r.output.find("unknown argument: --bogus (arguments for the sweep go after --") != std::string::npos);
  CHECK(r.output.find("started") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "o2"));
  // --out through a link into the checkout is inside the checkout: refused, nothing made there.
  fs::create_directory_symlink(source(""), dir / "checkout");
  r = run_command(env + script + " --out '" + (dir / "checkout" / "gpu-out-planted").string() + "'");
  CHECK(r.code == 1);
  CHECK(r.output.find("--out must be outside the checkout") != std::string::npos);
  CHECK_FALSE(fs::exists(source("gpu-out-planted")));
  // Links planted where it writes: the temp names are its own, the outputs refused.
  const auto victim = dir / "victim.txt";
  std::ofstream(victim) << "keep me\n";
  fs::create_directories(dir / "o3");
  fs::create_symlink(victim, dir / "o3" / "summary.txt.tmp");
  fs::create_symlink(victim, dir / "o3" / "gpu-check.tar.gz.tmp");
  r = run_command(env + script + " --out '" + (dir / "o3").string() + "'");
  INFO(r.output);
  CHECK(r.code == 1);  // no torch: the preflight fails
  CHECK(accel_test::read_text(victim) == "keep me\n");
  CHECK(fs::is_regular_file(fs::symlink_status(dir / "o3" / "summary.txt")));
  CHECK(fs::is_regular_file(fs::symlink_status(dir / "o3" / "preflight.txt")));
  fs::create_directories(dir / "o4");
  fs::create_symlink(victim, dir / "o4" / "summary.txt");
  r = run_command(env + script + " --out '" + (dir / "o4").string() + "'");
  CHECK(r.code == 1);
  CHECK(r.output.find("summary.txt is a link or not a regular file") != std::string::npos);
  CHECK(accel_test::read_text(victim) == "keep me\n");
  fs::remove_all(dir);
}
