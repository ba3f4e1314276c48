#include "accel/results/history.h"

#include <sqlite3.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <tuple>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include "accel/config/run_config.h"
#include "accel/results/charts.h"
#include "accel/results/compare.h"
#include "accel/results/report.h"
#include "accel/results/stats.h"
#include "accel/util/errors.h"
#include "accel/util/hash.h"
#include "accel/util/input_file.h"
#include "accel/results/result_set.h"
#include "accel/util/json_doc.h"

namespace fs = std::filesystem;

namespace accel::results {

using machine::format_double;

namespace {

constexpr const char* kApp = "accel-bench history";

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The hash of the config as compare judges it: resolved by today's schema
// where it still resolves, without the fields that say where a run happens.
std::string comparable_hash(const Json& config) {
  Json c = config;
  try {
    c = config::resolve_config(config, ".");
  } catch (const ConfigError&) {
  }
  return config::config_hash(comparable_config(c));
}

// A set's identity: its manifest's bytes (a sweep writes each its own), else
// its runs' result.json bytes.
std::string set_identity(const ResultSet& set) {
  std::string bytes;
  try {
    bytes = read_input_file(set.dir / "sweep.json", "sweep.json");
  } catch (const std::exception&) {
    for (const auto* list : {&set.upstream, &set.rungs}) {
      for (const auto& r : *list) {
        for (const auto& run : r.repeats) {
          try {
            bytes += read_input_file(run.dir / "result.json", "result.json");
          } catch (const std::exception&) {
          }
        }
      }
    }
  }
  return (set.suite.empty() ? "runs" : set.suite) + "@" + set.machine_id + "#" + util::fnv1a_hex(bytes).substr(0, 12);
}

OptNum max_memory(const RunRecord& r) {
  if (r.peak_memory_bytes.empty()) return std::nullopt;
  return *std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end());
}

}  // namespace

struct History::Db {
  sqlite3* db = nullptr;
  std::string file;
  int version = 0;  // the file's schema once opened (a read-only one may be older)
  ~Db() {
    if (db != nullptr) sqlite3_close(db);
  }
  // "not an accel-bench history" only when the file is not SQLite; a full
  // disk or a lock says what it is.
  const char* read_failure() const {
    const int rc = sqlite3_errcode(db) & 0xff;
    return rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT ? "not an accel-bench history" : "cannot read";
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(file + ": " + what + ": " + (db != nullptr ? sqlite3_errmsg(db) : "cannot open"));
  }
  void exec(const std::string& sql, const char* what) const {
    char* err = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err != nullptr ? err : "?";
      sqlite3_free(err);
      throw ConfigError(file + ": " + what + ": " + msg);
    }
  }
  int version_of(const std::string& value) const;
  int check_ours() const;
  // One text value of a query, or "" when it returns no row.
  std::string scalar(const std::string& sql) const {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) fail(read_failure());
    std::string out;
    const int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      sqlite3_finalize(st);
      fail(read_failure());
    }
    sqlite3_finalize(st);
    return out;
  }
};

namespace {

// The schema, version by version: a file at version k runs the steps after k.
const std::vector<std::string>& migrations() {
  static const std::vector<std::string> steps = {
      // 1: the runs and their measures
      "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "INSERT INTO meta VALUES('app', 'accel-bench history');"
      "CREATE TABLE runs(run_key TEXT PRIMARY KEY, set_id TEXT NOT NULL, machine_id TEXT NOT NULL,"
      " suite TEXT, rung TEXT NOT NULL, repeat INTEGER, config_hash TEXT, accel_bench_version TEXT,"
      " libtorch_version TEXT, git_sha TEXT, finished_at TEXT, status TEXT, train_time_s REAL,"
      " step_ms REAL, samples_per_s REAL, test_acc REAL, peak_memory_bytes REAL);",
      // 2: the exact work counters, and an index for trends and windows
      "ALTER TABLE runs ADD COLUMN counters TEXT;"
      "CREATE INDEX runs_trend ON runs(machine_id, rung, config_hash, finished_at);",
      // 3: a language model's test loss (test_acc holds a share only)
      "ALTER TABLE runs ADD COLUMN test_loss REAL;",
  };
  return steps;
}

}  // namespace

namespace {

// The file as a SQLite URI ("file:/a%20b?immutable=1"): '%', '?' and '#'
// in the path escaped.
std::string immutable_uri(const std::string& path) {
  std::string out = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "?immutable=1";
}

}  // namespace

int History::Db::version_of(const std::string& value) const {
  // Strictly an integer from 1 to the latest: a doctored "-7" or "1e9" is
  // never an index into the migrations.
  const int latest = int(migrations().size());
  const bool digits = !value.empty() && value.size() <= 6 &&
                      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int v = digits ? std::atoi(value.c_str()) : 0;
  if (v > latest) {
    throw ConfigError(file + ": a history of schema " + value + ", newer than this accel-bench's (" +
                      std::to_string(latest) + "): use a newer accel-bench");
  }
  if (v < 1) {
    throw ConfigError(file + ": schema_version \"" + clean_text(value, 40) +
                      "\" is not a schema of an accel-bench history (an integer from 1 to " +
                      std::to_string(latest) + "); left as it is");
  }
  return v;
}

// The schema of an accel-bench history, 0 for a new (empty) SQLite file;
// ConfigError, changing nothing, for any other file.
int History::Db::check_ours() const {
  const std::string tables = scalar("SELECT group_concat(name) FROM sqlite_master WHERE type='table'");
  if (tables.empty()) return 0;
  if (("," + tables + ",").find(",meta,") == std::string::npos) {
    throw ConfigError(file + ": a SQLite file, but not an accel-bench history (no meta table); left as it is");
  }
  if (scalar("SELECT value FROM meta WHERE key='app'") != kApp) {
    throw ConfigError(file + ": a SQLite file with a meta table, but not an accel-bench history; left as it is");
  }
  return version_of(scalar("SELECT value FROM meta WHERE key='schema_version'"));
}

History::History(const fs::path& file, Mode mode) : db_(std::make_unique<Db>()), file_(file.string()) {
  db_->file = file_;
  std::error_code ec;
  const bool exists = fs::exists(file, ec);
  if (exists && !fs::is_regular_file(file, ec)) {
    throw ConfigError(file_ + ": not a regular file (an accel-bench history is a SQLite file)");
  }
  if (mode == Mode::read_only) {
    if (!exists) throw ConfigError(file_ + ": no such history");
    // A folder nobody may write (a read-only mount, another user's): no
    // -wal or -shm file can be made beside the history, so it is read as
    // immutable; otherwise a plain read-only open sees a writer's WAL too.
    // A plain read-only open sees a writer's WAL and its locks; where that
    // cannot work (a read-only mount, a folder nobody may write, so no -shm
    // can be made) the file is read as immutable instead.
    int version = 0;
    for (const bool immutable : {false, true}) {
      const int rc = immutable ? sqlite3_open_v2(immutable_uri(fs::absolute(file).string()).c_str(), &db_->db,
                                                 SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr)
                               : sqlite3_open_v2(file_.c_str(), &db_->db, SQLITE_OPEN_READONLY, nullptr);
      if (rc != SQLITE_OK) db_->fail("cannot open");
      sqlite3_busy_timeout(db_->db, 30000);
      try {
        version = db_->check_ours();
        break;
      } catch (const ConfigError&) {
        const int code = sqlite3_errcode(db_->db) & 0xff;
        if (immutable || (code != SQLITE_CANTOPEN && code != SQLITE_READONLY)) throw;
        sqlite3_close(db_->db);
        db_->db = nullptr;
      }
    }
    if (version == 0) throw ConfigError(file_ + ": an empty SQLite file, not an accel-bench history yet");
    // An older schema reads as it is (the columns it lacks are empty); an
    // add migrates it.
    db_->version = version;
    return;
  }
  if (!file.parent_path().empty()) fs::create_directories(file.parent_path());
  const int opened = sqlite3_open_v2(file_.c_str(), &db_->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  // SQLite falls back to reading a file it may not write: said as such here,
  // not as "unable to open" when it later needs the WAL's index.
  if (opened != SQLITE_OK || sqlite3_db_readonly(db_->db, "main") == 1) {
    if (exists && ::access(file_.c_str(), W_OK) != 0) {
      throw ConfigError(file_ + ": read-only (" + std::strerror(errno) +
                        "): history add writes to it; show, export and compare --history read it as it is");
    }
    if (opened == SQLITE_OK) {
      throw ConfigError(file_ + ": read-only: history add writes to it; show, export and compare --history read it");
    }
    db_->fail("cannot open");
  }
  sqlite3_busy_timeout(db_->db, 30000);  // another job adding: wait for it
  // Read before anything is written: a file that is not ours fails here,
  // unchanged (not even switched to WAL).
  db_->check_ours();
  // The journal mode changes without the busy handler's wait (SQLite takes
  // an exclusive lock for it and gives up at once): two adds on a fresh
  // file would see "database is locked". Retried here within the timeout.
  if (db_->scalar("PRAGMA journal_mode") != "wal") {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int attempt = 0;; ++attempt) {
      char* err = nullptr;
      const int rc = sqlite3_exec(db_->db, "PRAGMA journal_mode=WAL", nullptr, nullptr, &err);
      const std::string msg = err != nullptr ? err : sqlite3_errmsg(db_->db);
      sqlite3_free(err);
      if (rc == SQLITE_OK) break;
      if ((rc == SQLITE_READONLY || (rc & 0xff) == SQLITE_READONLY)) {
        throw ConfigError(file_ + ": read-only (" + msg + "): history add writes to it");
      }
      if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) {
        throw ConfigError(file_ + ": cannot use a write-ahead log: " + msg);
      }
      if (std::chrono::steady_clock::now() > give_up) {
        throw ConfigError(file_ + ": cannot use a write-ahead log: " + msg + " (for 30 s)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + 5 * std::min(attempt, 20)));
    }
  }
  if (sqlite3_exec(db_->db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    const int rc = sqlite3_errcode(db_->db);
    if ((rc & 0xff) == SQLITE_READONLY) {
      throw ConfigError(file_ + ": read-only (" + sqlite3_errmsg(db_->db) + "): history add writes to it");
    }
    db_->fail("cannot lock");
  }
  try {
    // Again under the lock: another job may have made or migrated it meanwhile.
    const int version = db_->check_ours();
    const int latest = int(migrations().size());
    for (int v = version; v < latest; ++v) {
      db_->exec(migrations()[size_t(v)], "migrating the history");
      db_->exec("INSERT OR REPLACE INTO meta VALUES('schema_version', '" + std::to_string(v + 1) + "')",
                "migrating the history");
    }
    db_->exec("COMMIT", "cannot write");
    db_->version = latest;
  } catch (...) {
    sqlite3_exec(db_->db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

History::~History() = default;

int History::schema_version() const {
  return db_->version_of(db_->scalar("SELECT value FROM meta WHERE key='schema_version'"));
}

namespace {

void bind_text(sqlite3_stmt* st, int i, const std::string& v) {
  sqlite3_bind_text(st, i, v.c_str(), int(v.size()), SQLITE_TRANSIENT);
}
void bind_num(sqlite3_stmt* st, int i, const OptNum& v) {
  if (v) {
    sqlite3_bind_double(st, i, *v);
  } else {
    sqlite3_bind_null(st, i);
  }
}

const char* kInsert =
    "INSERT OR IGNORE INTO runs(run_key, set_id, machine_id, suite, rung, repeat, config_hash,"
    " accel_bench_version, libtorch_version, git_sha, finished_at, status, train_time_s, step_ms,"
    " samples_per_s, test_acc, peak_memory_bytes, counters, test_loss)"
    " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";

int insert_runs(sqlite3* db, const std::vector<HistoryRun>& runs, const std::string& file) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, kInsert, -1, &st, nullptr) != SQLITE_OK) {
    throw ConfigError(file + ": cannot add: " + sqlite3_errmsg(db));
  }
  int added = 0;
  for (const auto& r : runs) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    bind_text(st, 1, r.run_key);
    bind_text(st, 2, r.set_id);
    bind_text(st, 3, r.machine_id);
    bind_text(st, 4, r.suite);
    bind_text(st, 5, r.rung);
    sqlite3_bind_int(st, 6, r.repeat);
    bind_text(st, 7, r.config_hash);
    bind_text(st, 8, r.accel_bench_version);
    bind_text(st, 9, r.libtorch_version);
    bind_text(st, 10, r.git_sha);
    bind_text(st, 11, r.finished_at);
    bind_text(st, 12, r.status);
    bind_num(st, 13, r.train_time_s);
    bind_num(st, 14, r.step_ms);
    bind_num(st, 15, r.samples_per_s);
    bind_num(st, 16, r.test_acc);
    bind_num(st, 17, r.peak_memory_bytes);
    if (r.counters.is_null()) {
      sqlite3_bind_null(st, 18);
    } else {
      bind_text(st, 18, r.counters.dump());
    }
    bind_num(st, 19, r.test_loss);
    if (sqlite3_step(st) != SQLITE_DONE) {
      const std::string msg = sqlite3_errmsg(db);
      sqlite3_finalize(st);
      throw ConfigError(file + ": cannot add: " + msg);
    }
    added += sqlite3_changes(db);
  }
  sqlite3_finalize(st);
  return added;
}

int add_in_transaction(sqlite3* db, const std::vector<HistoryRun>& runs, const std::string& file) {
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    throw ConfigError(file + ": cannot lock: " + sqlite3_errmsg(db));
  }
  try {
    const int added = insert_runs(db, runs, file);
    if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      throw ConfigError(file + ": cannot write: " + sqlite3_errmsg(db));
    }
    return added;
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

// A row's text as every reader may show it (a doctored db is a file like any other).
std::string text_col(sqlite3_stmt* st, int i, size_t cap = kMaxTextBytes) {
  const auto* t = sqlite3_column_text(st, i);
  return t != nullptr ? clean_text(reinterpret_cast<const char*>(t), cap) : "";
}
// A measure: a finite number, else n/a (text in a REAL column is not 0).
OptNum num_col(sqlite3_stmt* st, int i) {
  const int type = sqlite3_column_type(st, i);
  if (type != SQLITE_FLOAT && type != SQLITE_INTEGER) return std::nullopt;
  const double v = sqlite3_column_double(st, i);
  return std::isfinite(v) ? OptNum(v) : std::nullopt;
}

Json run_json(const HistoryRun& r) {
  auto num = [](const OptNum& v) { return v ? Json(*v) : Json(); };
  return {{"run_key", r.run_key},
          {"set_id", r.set_id},
          {"machine_id", r.machine_id},
          {"suite", r.suite},
          {"rung", r.rung},
          {"repeat", r.repeat},
          {"config_hash", r.config_hash},
          {"accel_bench_version", r.accel_bench_version},
          {"libtorch_version", r.libtorch_version},
          {"git_sha", r.git_sha},
          {"finished_at", r.finished_at},
          {"status", r.status},
          {"train_time_s", num(r.train_time_s)},
          {"step_ms", num(r.step_ms)},
          {"samples_per_s", num(r.samples_per_s)},
          {"test_acc", num(r.test_acc)},
          {"test_loss", num(r.test_loss)},
          {"peak_memory_bytes", num(r.peak_memory_bytes)},
          {"counters", r.counters}};
}

}  // namespace

int History::add_set(const ResultSet& set) {
  const std::string set_id = set_identity(set);
  std::vector<HistoryRun> runs;
  for (const auto* list : {&set.upstream, &set.rungs}) {
    for (const auto& rung : *list) {
      int repeat = 0;
      for (const auto& run : rung.repeats) {
        ++repeat;
        std::string bytes;
        try {
          bytes = read_input_file(run.dir / "result.json", "result.json");
        } catch (const std::exception&) {
          continue;  // a run folder without its result: nothing to add
        }
        // A record refused as read (impossible figures, not JSON) refuses
        // the whole add, naming it, before anything is written.
        if (run.status == "unreadable") {
          throw ConfigError(run.error.empty() ? (run.dir / "result.json").string() + ": unreadable" : run.error);
        }
        HistoryRun h;
        h.run_key = util::fnv1a_hex(bytes);
        h.set_id = set_id;
        h.machine_id = set.machine_id;
        h.suite = set.suite;
        h.rung = rung.id;
        h.repeat = repeat;
        h.config_hash = comparable_hash(run.config);
        h.accel_bench_version = str_at(run.env, "accel_bench_version");
        h.libtorch_version = str_at(run.env, "libtorch_version");
        h.git_sha = str_at(run.env, "git_sha");
        h.finished_at = !run.finished_at.empty() ? run.finished_at : utc_now();
        h.status = run.status;
        h.train_time_s = run.train_time_s;
        h.step_ms = run.step_ms_median;
        h.samples_per_s = run.samples_per_s;
        // A share is the history's test accuracy, a loss its test loss
        // (another metric, neither).
        h.test_acc = run.metric.proportion ? run.test_acc : std::nullopt;
        h.test_loss = run.metric.is_loss() ? run.test_acc : std::nullopt;
        h.peak_memory_bytes = max_memory(run);
        h.counters = run.counters;
        runs.push_back(std::move(h));
      }
    }
  }
  return add_in_transaction(db_->db, runs, file_);
}

int History::add_lines(const std::string& jsonl, const std::string& source) {
  std::vector<HistoryRun> runs;
  std::istringstream in(jsonl);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j = parse_json_or_discarded(line);
    const auto where = source + ":" + std::to_string(n);
    if (!j.is_object()) throw ConfigError(where + ": not a JSON object (history export writes one per line)");
    clean_strings(j);
    // Types and ranges as a run record's: a string time, a repeat of 1e300
    // or an accuracy of 1e308 would later make normal rungs look suspicious.
    for (const char* key : {"suite", "config_hash", "accel_bench_version", "libtorch_version", "git_sha",
                            "finished_at", "status"}) {
      if (j.contains(key) && !j[key].is_null() && !j[key].is_string()) {
        throw ConfigError(where + ": " + key + ": not a string");
      }
    }
    // A failed run's times may be 0 (it stopped in its first epoch): only an
    // ok run's must be > 0, as a run record's are.
    const bool ok_run = str_at(j, "status") == "ok";
    for (const auto& [key, lo, hi, positive] :
         {std::tuple{"train_time_s", 0.0, 1e12, true}, std::tuple{"step_ms", 0.0, 1e12, true},
          std::tuple{"samples_per_s", 0.0, 1e15, true}, std::tuple{"test_acc", 0.0, 1.0, false},
          std::tuple{"test_loss", -1e6, 1e6, false},
          std::tuple{"peak_memory_bytes", 0.0, 1e18, true}, std::tuple{"repeat", 1.0, 1e6, false}}) {
      if (!j.contains(key) || j[key].is_null()) continue;
      const auto& v = j[key];
      if (!v.is_number()) throw ConfigError(where + ": " + key + ": not a number");
      const double x = v.get<double>();
      const bool open_low = positive && ok_run;
      const bool in = (open_low ? x > lo : x >= lo) && x <= hi && (std::string(key) != "repeat" || std::floor(x) == x);
      if (!in) {
        throw ConfigError(where + ": " + key + " is " + format_double("%.6g", x) + ": outside " +
                          (open_low ? "(" : "[") + format_double("%g", lo) + ", " + format_double("%g", hi) + "]" +
                          (std::string(key) == "repeat" ? " (an integer)" : ""));
      }
    }
    if (j.contains("counters") && !j["counters"].is_null() && !j["counters"].is_object()) {
      throw ConfigError(where + ": counters: not an object");
    }
    for (const char* key : {"run_key", "set_id", "machine_id", "rung"}) {
      if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty()) {
        throw ConfigError(where + ": " + key + ": missing or not a string");
      }
    }
    HistoryRun h;
    h.run_key = j["run_key"];
    h.set_id = j["set_id"];
    h.machine_id = j["machine_id"];
    h.suite = str_at(j, "suite");
    h.rung = j["rung"];
    h.repeat = int(num_at(j, "repeat").value_or(1));
    h.config_hash = str_at(j, "config_hash");
    h.accel_bench_version = str_at(j, "accel_bench_version");
    h.libtorch_version = str_at(j, "libtorch_version");
    h.git_sha = str_at(j, "git_sha");
    h.finished_at = str_at(j, "finished_at");
    h.status = str_at(j, "status");
    h.train_time_s = num_at(j, "train_time_s");
    h.step_ms = num_at(j, "step_ms");
    h.samples_per_s = num_at(j, "samples_per_s");
    h.test_acc = num_at(j, "test_acc");
    h.test_loss = num_at(j, "test_loss");
    h.peak_memory_bytes = num_at(j, "peak_memory_bytes");
    h.counters = j.value("counters", Json());
    runs.push_back(std::move(h));
  }
  return add_in_transaction(db_->db, runs, file_);
}

std::vector<HistoryRun> History::runs(const Filter& f) const {
  // A column a read-only file of an older schema lacks reads as NULL.
  std::string sql =
      "SELECT run_key, set_id, machine_id, suite, rung, repeat, config_hash, accel_bench_version,"
      " libtorch_version, git_sha, finished_at, status, train_time_s, step_ms, samples_per_s, test_acc,"
      " peak_memory_bytes, " +
      std::string(db_->version >= 2 ? "counters" : "NULL") + ", " + (db_->version >= 3 ? "test_loss" : "NULL") +
      " FROM runs WHERE 1=1";
  if (!f.machine.empty()) sql += " AND machine_id = ?1";
  if (!f.rung.empty()) sql += " AND rung = ?2";
  if (!f.config_hash.empty()) sql += " AND config_hash = ?3";
  sql += " ORDER BY finished_at, run_key";
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_->db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) db_->fail("cannot read");
  if (!f.machine.empty()) bind_text(st, 1, f.machine);
  if (!f.rung.empty()) bind_text(st, 2, f.rung);
  if (!f.config_hash.empty()) bind_text(st, 3, f.config_hash);
  std::vector<HistoryRun> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    HistoryRun h;
    h.run_key = text_col(st, 0);
    h.set_id = text_col(st, 1);
    h.machine_id = text_col(st, 2);
    h.suite = text_col(st, 3);
    h.rung = text_col(st, 4);
    h.repeat = sqlite3_column_int(st, 5);
    h.config_hash = text_col(st, 6);
    h.accel_bench_version = text_col(st, 7);
    h.libtorch_version = text_col(st, 8);
    h.git_sha = text_col(st, 9);
    h.finished_at = text_col(st, 10);
    h.status = text_col(st, 11);
    h.train_time_s = num_col(st, 12);
    h.step_ms = num_col(st, 13);
    h.samples_per_s = num_col(st, 14);
    h.test_acc = num_col(st, 15);
    h.peak_memory_bytes = num_col(st, 16);
    const auto counters = text_col(st, 17, size_t(16) << 20);
    if (!counters.empty()) {
      h.counters = parse_json_or_discarded(counters);
      if (!h.counters.is_object()) h.counters = Json();  // a doctored row: no counters, never "<discarded>"
    }
    h.test_loss = num_col(st, 18);
    out.push_back(std::move(h));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) db_->fail("cannot read");
  return out;
}

std::string History::export_lines() const {
  std::string out;
  for (const auto& r : runs()) out += run_json(r).dump() + "\n";
  return out;
}

const std::vector<std::string>& history_measures() {
  static const std::vector<std::string> m = {"training time", "step time", "samples/s", "test accuracy",
                                             "test loss", "peak memory"};
  return m;
}

OptNum history_measure(const HistoryRun& r, const std::string& measure) {
  if (measure == "training time") return r.train_time_s;
  if (measure == "step time") return r.step_ms;
  if (measure == "samples/s") return r.samples_per_s;
  if (measure == "test accuracy") return r.test_acc ? OptNum(*r.test_acc * 100) : std::nullopt;
  if (measure == "test loss") return r.test_loss;
  if (measure == "peak memory") return r.peak_memory_bytes ? OptNum(*r.peak_memory_bytes / 1e9) : std::nullopt;
  std::string names;
  for (const auto& n : history_measures()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("--measure " + measure + ": not a measure of the history (" + names + ")");
}

namespace {

const char* measure_unit(const std::string& m) {
  return m == "training time" ? "s" : m == "step time" ? "ms" : m == "samples/s" ? "1/s" : m == "test accuracy" ? "%"
         : m == "test loss" ? "" : "GB";
}
// "training time (s)"; a loss in its own units, "test loss".
std::string with_unit(const std::string& m) {
  const std::string unit = measure_unit(m);
  return unit.empty() ? m : m + " (" + unit + ")";
}

}  // namespace

std::vector<TrendPoint> history_trend(const std::vector<HistoryRun>& runs, const std::string& measure) {
  // (set, rung, machine, config) -> values, in the order first seen (runs come in date order).
  std::vector<TrendPoint> points;
  std::map<std::string, std::pair<size_t, std::vector<double>>> at;
  for (const auto& r : runs) {
    if (r.status != "ok") continue;
    const auto v = history_measure(r, measure);
    if (!v) continue;
    const std::string key = r.set_id + "\x1f" + r.rung + "\x1f" + r.machine_id + "\x1f" + r.config_hash;
    auto it = at.find(key);
    if (it == at.end()) {
      points.push_back({r.set_id, r.machine_id, r.rung, r.config_hash, r.finished_at, r.git_sha, 0, 0});
      it = at.emplace(key, std::make_pair(points.size() - 1, std::vector<double>{})).first;
    }
    it->second.second.push_back(*v);
  }
  for (auto& [key, p] : at) {
    points[p.first].runs = int(p.second.size());
    points[p.first].value = stats::median(p.second);
  }
  return points;
}

std::string trend_text(const std::vector<TrendPoint>& points, const std::string& measure) {
  std::ostringstream out;
  out << "| date | machine | rung | config | set | git | runs | " << with_unit(measure)
      << " |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& p : points) {
    out << "| " << markdown_text(p.finished_at) << " | " << markdown_text(p.machine_id) << " | " << markdown_text(p.rung) << " | "
        << markdown_text(p.config_hash.substr(0, 8)) << " | " << markdown_text(p.set_id) << " | " << markdown_text(p.git_sha) << " | "
        << p.runs << " | " << format_double("%.4g", p.value) << " |\n";
  }
  if (points.empty()) out << "(no runs with this measure)\n";
  return out.str();
}

std::vector<fs::path> trend_charts(const std::vector<TrendPoint>& points, const std::string& measure,
                                   const fs::path& dir) {
  // One series per (machine, rung, config), one x per set in date order.
  std::vector<std::string> sets, series;
  std::map<std::pair<std::string, std::string>, double> value;
  for (const auto& p : points) {
    if (std::find(sets.begin(), sets.end(), p.set_id) == sets.end()) sets.push_back(p.set_id);
    const std::string s = p.rung + " " + p.machine_id + " " + p.config_hash.substr(0, 8);
    if (std::find(series.begin(), series.end(), s) == series.end()) series.push_back(s);
    value[{p.set_id, s}] = p.value;
  }
  ChartData c;
  c.name = "history";
  c.kind = "lines";
  c.title = measure + " per result set";
  c.ylabel = with_unit(measure);
  std::ostringstream csv;
  csv << "set";
  for (const auto& s : series) csv << "," << csv_text(s);
  csv << "\n";
  for (size_t i = 0; i < sets.size(); ++i) {
    csv << (i + 1);
    for (const auto& s : series) {
      const auto it = value.find({sets[i], s});
      csv << ",";
      if (it != value.end()) csv << format_double("%.6g", it->second);
    }
    csv << "\n";
  }
  c.csv = csv.str();
  const auto out = write_trend_chart(c, "accel-bench history", dir);
  if (!out.notice.empty()) std::fprintf(stderr, "%s\n", out.notice.c_str());
  return out.files;
}

HistoryOutcome judge_against_history(const std::vector<HistoryRun>& history, const ResultSet& other, int window,
                                     const CompareBounds& bounds) {
  HistoryOutcome out;
  const std::string other_id = set_identity(other);
  std::ostringstream md;
  md << "| rung | measure | value | window median | sets | verdict |\n|---|---|---|---|---|---|\n";
  struct Judged {
    const char* measure;
    std::optional<double> bound;
    bool lower_is_worse, points;
  };
  const std::vector<Judged> judged = {{"training time", bounds.slower_pct, false, false},
                                      {"step time", bounds.slower_pct, false, false},
                                      {"test accuracy", bounds.acc_drop_points, true, true},
                                      {"test loss", bounds.loss_rise, false, true},
                                      {"peak memory", bounds.memory_growth_pct, false, false}};
  for (const auto& rung : other.rungs) {
    std::vector<const RunRecord*> ok;
    for (const auto& run : rung.repeats) {
      if (run.ok()) ok.push_back(&run);
    }
    if (ok.empty()) continue;
    const std::string hash = comparable_hash(ok.front()->config);
    // The history's sets of this machine, rung and config, oldest first, without OTHER.
    std::vector<HistoryRun> mine;
    for (const auto& h : history) {
      if (h.machine_id == other.machine_id && h.rung == rung.id && h.config_hash == hash && h.set_id != other_id) {
        mine.push_back(h);
      }
    }
    for (const auto& j : judged) {
      if (!j.bound) continue;
      std::vector<double> values;
      for (const auto* run : ok) {
        HistoryRun h;
        h.train_time_s = run->train_time_s;
        h.step_ms = run->step_ms_median;
        h.test_acc = run->metric.proportion ? run->test_acc : std::nullopt;
        h.test_loss = run->metric.is_loss() ? run->test_acc : std::nullopt;
        h.peak_memory_bytes = max_memory(*run);
        if (auto v = history_measure(h, j.measure)) values.push_back(*v);
      }
      if (values.empty()) continue;
      HistoryVerdict v;
      v.rung = rung.id;
      v.measure = j.measure;
      v.value = stats::median(values);
      const auto trend = history_trend(mine, j.measure);
      auto violates = [&](double value, double base) {
        if (j.points) return j.lower_is_worse ? base - value > *j.bound : value - base > *j.bound;
        return j.lower_is_worse ? value < base * (1 - *j.bound / 100) : value > base * (1 + *j.bound / 100);
      };
      auto window_median = [&](size_t end) -> OptNum {  // the `window` sets before index `end`
        if (end == 0) return std::nullopt;
        std::vector<double> w;
        for (size_t i = end > size_t(window) ? end - size_t(window) : 0; i < end; ++i) w.push_back(trend[i].value);
        return stats::median(w);
      };
      v.baseline = window_median(trend.size());
      v.window_sets = int(std::min(trend.size(), size_t(window)));
      if (!v.baseline) {
        v.verdict = "no history";
      } else if (!violates(*v.value, *v.baseline)) {
        v.verdict = "ok";
      } else {
        // The dashboard's rule: a regression when the set before also violated its own window.
        const auto prev_base = window_median(trend.size() - 1);
        const bool prev_violated = prev_base && violates(trend.back().value, *prev_base);
        v.verdict = prev_violated ? "regression" : "suspicious";
      }
      if (v.verdict == "regression") ++out.regressions;
      if (v.verdict == "suspicious") ++out.suspicious;
      md << "| " << markdown_text(v.rung) << " | " << with_unit(v.measure) << " | "
         << format_double("%.4g", *v.value) << " | " << (v.baseline ? format_double("%.4g", *v.baseline) : "-")
         << " | " << v.window_sets << " | " << v.verdict << " |\n";
      out.verdicts.push_back(v);
    }
  }
  std::ostringstream head;
  head << (out.regressions > 0 ? "HISTORY REGRESSION: " : out.suspicious > 0 ? "HISTORY SUSPICIOUS: " : "history: ")
       << out.regressions << " regressions (two sets in a row beyond the bound), " << out.suspicious
       << " suspicious (one set beyond it), against the median of the last " << window
       << " sets of the same machine, rung and config";
  out.markdown = head.str() + "\n\n" + md.str();
  return out;
}

int History::add_inputs(const std::vector<std::string>& inputs, std::ostream& log) {
  if (inputs.empty()) throw ConfigError("history add: give result sets (or a .jsonl export)");
  int added = 0;
  for (const auto& in : inputs) {
    if (!std::filesystem::is_directory(in)) {  // an export; read_input_file names a FIFO or a missing file
      const int n = add_lines(read_input_file(in, "history export"), in);
      added += n;
      log << "history: " << clean_text(in, kMaxTextBytes, true) << ": " << n << " runs added\n";
      continue;
    }
    int seen = 0;
    for (const auto& dir : find_result_sets(in)) {
      const int n = add_set(load_result_set(dir));
      ++seen;
      added += n;
      log << "history: " << clean_text(dir.string(), kMaxTextBytes, true) << ": " << n << " runs added"
          << (n == 0 ? " (already there)" : "") << "\n";
    }
    if (seen == 0) throw ConfigError("history add: " + in + ": no result set there");
  }
  return added;
}

}  // namespace accel::results
