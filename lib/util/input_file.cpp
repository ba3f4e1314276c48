#include "accel/util/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "accel/util/errors.h"

namespace accel {

std::string read_input_file(const std::filesystem::path& file, const std::string& what,
                            int64_t max_bytes, bool pipe_ok, bool follow_links) {
  const std::string name = (what.empty() ? "" : what + " ") + file.string();
  // O_NONBLOCK: opening a FIFO nobody writes returns at once instead of
  // waiting for a writer; fstat then refuses it.
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw ConfigError(name + ": no such file");
    if (!follow_links && errno == ELOOP) {
      throw ConfigError(name + ": a symbolic link (refused: only the file itself is read)");
    }
    throw DataError(file.string() + ": cannot open for reading: " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw DataError(file.string() + ": cannot stat: " + std::strerror(errno));
  }
  if (pipe_ok && S_ISFIFO(st.st_mode)) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // wait for the writer's bytes
  } else if (!S_ISREG(st.st_mode)) {
    throw ConfigError(name + ": not a regular file (a FIFO, socket, device or folder)");
  }
  if (int64_t(st.st_size) > max_bytes) {
    throw DataError(file.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
  }
  std::string out;
  out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw DataError(file.string() + ": read error: " + std::strerror(errno));
    }
    if (got == 0) break;
    out.append(buf, size_t(got));
    // A file that grows while it is read stops at the limit too.
    if (int64_t(out.size()) > max_bytes) {
      throw DataError(file.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  return out;
}

void refuse_links_leaving(const std::filesystem::path& root, const std::string& what, size_t max_entries) {
  namespace fs = std::filesystem;
  const std::string name = (what.empty() ? "" : what + " ") + root.string();
  std::error_code ec;
  const fs::path base = fs::canonical(root, ec);
  if (ec) throw ConfigError(name + ": cannot resolve: " + ec.message());
  const std::string prefix = base.string() + "/";
  fs::recursive_directory_iterator it(base, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) throw ConfigError(name + ": cannot list: " + ec.message());
  size_t seen = 0;
  for (; it != end; it.increment(ec)) {
    if (ec) throw ConfigError(name + ": cannot list: " + ec.message());
    if (++seen > max_entries) {
      throw ConfigError(name + ": holds more than " + std::to_string(max_entries) + " files and folders");
    }
    if (!it->is_symlink(ec)) continue;
    const fs::path link = it->path();
    const fs::path shown = root / link.lexically_relative(base);
    const fs::path target = fs::weakly_canonical(link, ec);
    if (ec) {
      throw ConfigError(name + ": " + shown.string() + " is a symbolic link that does not resolve (" +
                        ec.message() + ")");
    }
    if (target != base && target.string().rfind(prefix, 0) != 0) {
      throw ConfigError(name + ": " + shown.string() + " is a symbolic link leaving the folder (to " +
                        target.string() + "); refused");
    }
  }
}

}  // namespace accel
