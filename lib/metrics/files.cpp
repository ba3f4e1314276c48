// Atomic output files. Every file a run leaves behind (result.json,
// metrics.csv, config.json, and checkpoints if their writer uses it) goes
// through write_bytes_atomic: a reader, or the next run after a kill -9 or a
// power cut, sees either the old file or the complete new one, never a part.
#include <ctime>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <random>

#include "accel/metrics/metrics.h"
#include "accel/util/errors.h"

namespace accel::metrics {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTempMarker = ".tmp.";

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// <name>.tmp.<pid>.<random>: the pid says whose it is (remove_stale_temp_files
// keeps those of live processes), the random part keeps two writers of the
// same file in one process apart, and O_EXCL does the rest.
fs::path temp_name(const fs::path& path) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (uint64_t(::getpid()) << 32)};
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%08llx",
                static_cast<unsigned long long>((rng() ^ counter++) & 0xffffffffULL));
  fs::path tmp = path;
  tmp += kTempMarker + std::to_string(::getpid()) + "." + suffix;
  return tmp;
}

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw RunError(sys_error("write failed"));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Writes and fsyncs the temp file; closes fd in every case.
void fill(int fd, const std::vector<std::string_view>& pieces) {
  try {
    for (const auto& p : pieces) write_all(fd, p.data(), p.size());
    if (::fsync(fd) != 0) throw RunError(sys_error("fsync failed"));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw RunError(sys_error("close failed"));
}

// Makes the rename itself durable. Best effort: some filesystems refuse
// fsync on folders, and the file is already complete either way.
void sync_dir(const fs::path& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  ::fsync(dfd);
  ::close(dfd);
}

// The pid of a temp file written by write_bytes_atomic (or the checkpoint
// writer's ".<name>.tmp.<pid>.<n>"), or 0 when the name is not one of ours.
pid_t temp_owner(const std::string& name) {
  const auto at = name.rfind(kTempMarker);
  if (at == std::string::npos || at == 0 || (at == 1 && name[0] == '.')) return 0;
  const std::string rest = name.substr(at + std::strlen(kTempMarker));
  const auto dot = rest.find('.');
  const std::string pid = rest.substr(0, dot);
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  if (dot != std::string::npos) {
    const std::string tag = rest.substr(dot + 1);
    if (tag.empty() || tag.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      return 0;
  }
  return static_cast<pid_t>(std::stol(pid));
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

bool write_bytes_atomic(const fs::path& path, const std::vector<std::string_view>& pieces,
                        IfExists if_exists) {
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const fs::path tmp = temp_name(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw RunError(path.string() + ": " + sys_error("cannot create " + tmp.string()));
  try {
    fill(fd, pieces);
    if (if_exists == IfExists::Keep) {
      // link() fails on an existing target, so two writers cannot both win.
      if (::link(tmp.c_str(), path.c_str()) != 0) {
        if (errno == EEXIST) {
          ::unlink(tmp.c_str());
          return false;
        }
        throw RunError(sys_error("cannot link into place"));
      }
      ::unlink(tmp.c_str());
    } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
      throw RunError(sys_error("cannot move into place"));
    }
  } catch (const RunError& e) {
    ::unlink(tmp.c_str());
    throw RunError(path.string() + ": " + e.what());
  }
  sync_dir(dir);
  return true;
}

void write_file_atomic(const fs::path& path, const std::string& content) {
  write_bytes_atomic(path, {content});
}

void write_json_atomic(const fs::path& path, const nlohmann::json& doc) {
  write_file_atomic(path, doc.dump(2) + "\n");
}

std::vector<fs::path> remove_stale_temp_files(const fs::path& dir) {
  std::vector<fs::path> removed;
  std::error_code ec;
  auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return removed;  // no folder yet: nothing left over
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    const pid_t pid = temp_owner(it->path().filename().string());
    if (pid <= 0 || pid == ::getpid() || alive(pid)) continue;
    if (fs::remove(it->path(), ec)) removed.push_back(it->path());
  }
  return removed;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

DirLock::DirLock(const fs::path& dir, const std::string& what) : dir_(dir) {
  const std::string where = "--out " + dir.string() + ": ";
  std::error_code ec;
  made_ = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError(where + "cannot create the folder: " + ec.message());
  const auto file = dir / ".lock";
  // O_NOFOLLOW: a link planted as OUT/.lock would have us truncate and write
  // whatever it points at; O_NONBLOCK: a FIFO planted there would hang open().
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0) {
    if (errno == ELOOP) {
      throw ConfigError(where + file.string() +
                        " is a symbolic link, not a lock file accel-bench made; remove it");
    }
    throw ConfigError(where + sys_error("cannot open " + file.string()));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    errno = err;
    throw ConfigError(where + sys_error("cannot stat " + file.string()));
  }
  // nlink 0: a lock another run removed as this one opened it; then it is ours alone.
  if (!S_ISREG(st.st_mode) || st.st_nlink > 1) {
    const bool regular = S_ISREG(st.st_mode);
    ::close(fd_);
    fd_ = -1;
    // A second hard link would have us truncate a file that lives elsewhere too.
    throw ConfigError(where + file.string() +
                      (regular ? " has other hard links" : " is not a regular file") +
                      ", not a lock file accel-bench made; remove it");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[32] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n > 0) holder.assign(buf, size_t(n));
    holder = holder.substr(0, holder.find_first_not_of("0123456789"));
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      errno = err;
      throw ConfigError(where + sys_error("cannot lock " + file.string()));
    }
    throw ConfigError(where + "another " + what +
                      (holder.empty() ? std::string() : " (pid " + holder + ")") +
                      " is writing into this folder; wait for it to end or choose another --out");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; only the message of a refused run suffers.
  }
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    dir_ = std::move(o.dir_);
    made_ = o.made_;
    o.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

void DirLock::release_and_tidy() {
  if (fd_ < 0) return;
  std::error_code ec;
  if (made_) {
    bool only_lock = true;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      if (e.path().filename() != ".lock") only_lock = false;
    }
    if (!ec && only_lock) {
      fs::remove(dir_ / ".lock", ec);
      fs::remove(dir_, ec);
    }
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace accel::metrics
