// Addresses and ports for rendezvous: a free port to hand the ranks, and the
// local address that leads to the master.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "accel/dist/launcher.h"
#include "accel/util/errors.h"

namespace accel::dist {
namespace {

using AddrList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

AddrList resolve(const std::string& addr, const char* port, int socktype) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), port, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw ConfigError("address " + addr + ": cannot resolve it (" + gai_strerror(rc) + ")");
  }
  return AddrList(res, freeaddrinfo);
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

int free_tcp_port(const std::string& addr) {
  auto res = resolve(addr, "0", SOCK_STREAM);
  Fd s{::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) throw RunError(std::string("free_tcp_port: socket: ") + std::strerror(errno));
  if (::bind(s.fd, res->ai_addr, res->ai_addrlen) != 0) {
    throw ConfigError("address " + addr + ": cannot bind a TCP port there (" + std::strerror(errno) +
                      "); is it an address of this machine?");
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(s.fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    throw RunError(std::string("free_tcp_port: getsockname: ") + std::strerror(errno));
  }
  const auto port = ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port;
  return ntohs(port);
}

std::string local_address_towards(const std::string& addr) {
  auto res = resolve(addr, "9", SOCK_DGRAM);
  Fd s{::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
  // A UDP connect only chooses the route and source address; nothing is sent.
  if (s.fd < 0 || ::connect(s.fd, res->ai_addr, res->ai_addrlen) != 0) {
    throw RunError("no route to " + addr + ": " + std::strerror(errno));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(s.fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    throw RunError(std::string("local_address_towards: getsockname: ") + std::strerror(errno));
  }
  char buf[INET6_ADDRSTRLEN] = {};
  const void* a = ss.ss_family == AF_INET6
                      ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                      : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
  if (::inet_ntop(ss.ss_family, a, buf, sizeof buf) == nullptr) {
    throw RunError(std::string("local_address_towards: inet_ntop: ") + std::strerror(errno));
  }
  return buf;
}

}  // namespace accel::dist
