#include "accel/util/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "accel/util/errors.h"

namespace accel {

std::string read_input_file(const std::filesystem::path& file, const std::string& what,
                            int64_t max_bytes, bool pipe_ok) {
  const std::string name = (what.empty() ? "" : what + " ") + file.string();
  // O_NONBLOCK: opening a FIFO nobody writes returns at once instead of
  // waiting for a writer; fstat then refuses it.
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw ConfigError(name + ": no such file");
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

}  // namespace accel
