// The client of accel-bench's store, and the wire's HMAC and nonces
// (accel/dist/net_store.h, dist/net_store_wire.h).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "accel/dist/net_store.h"
#include "net_store_wire.h"

namespace accel::dist {

namespace wire {

Mac mac(const std::string& secret, const char* label, const uint8_t* a, const uint8_t* b) {
  Mac out{};
  if (secret.empty()) return out;
  Bytes msg(label, label + std::strlen(label));
  msg.insert(msg.end(), a, a + kNonce);
  msg.insert(msg.end(), b, b + kNonce);
  unsigned int len = 0;
  if (::HMAC(EVP_sha256(), secret.data(), int(secret.size()), msg.data(), msg.size(), out.data(),
             &len) == nullptr ||
      len != kMac) {
    throw std::runtime_error("store: OpenSSL HMAC failed");
  }
  return out;
}

bool same_mac(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, kMac) == 0; }

void random_nonce(uint8_t* out) {
  if (RAND_bytes(out, int(kNonce)) != 1) throw std::runtime_error("store: no random bytes");
}

}  // namespace wire

namespace {

using Clock = std::chrono::steady_clock;
using wire::Bytes;

// A refusal that another attempt would not change (wrong secret, not our store).
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// c10d's kNoTimeout (0) means no deadline.
Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return Clock::time_point::max();
  return Clock::now() + timeout;
}

int remaining_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return 1 << 30;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : int(std::min<int64_t>(left.count(), 1 << 30));
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
  }
}

void write_all(int fd, const uint8_t* p, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= std::size_t(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_for(fd, POLLOUT, deadline)) throw std::runtime_error("timed out sending");
    } else {
      throw std::runtime_error(std::string("connection lost: ") + std::strerror(errno));
    }
  }
}

// Reads exactly n bytes; throws "closed" on EOF.
void read_exact(int fd, uint8_t* p, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= std::size_t(r);
    } else if (r == 0) {
      throw std::runtime_error("closed");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_for(fd, POLLIN, deadline)) throw std::runtime_error("timed out waiting for an answer");
    } else {
      throw std::runtime_error(std::string("connection lost: ") + std::strerror(errno));
    }
  }
}

// A non-blocking connect to one address within the deadline; -1 and `error` set on failure.
int connect_one(const addrinfo* a, Clock::time_point deadline, std::string& error) {
  const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (!wait_for(fd, POLLOUT, deadline)) {
    err = ETIMEDOUT;
  } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    err = errno;
  }
  if (err != 0) {
    error = std::strerror(err);
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void handshake(int fd, const NetStoreOptions& o, Clock::time_point deadline) {
  const std::string where = o.host + ":" + std::to_string(o.port);
  uint8_t hello[wire::kServerHello];
  try {
    read_exact(fd, hello, sizeof hello, deadline);
  } catch (const std::exception& e) {
    // Retried: a server busy with connects may have let this one go.
    throw std::runtime_error(std::string("no store greeting from ") + where + " (" + e.what() +
                             "): is another service on that port?");
  }
  if (std::memcmp(hello, wire::kMagic, 8) != 0) {
    throw Refused(where + " is not an accel-bench store (another service on that port?)");
  }
  if (hello[8] != wire::kVersion) {
    throw Refused("the store at " + where + " speaks protocol " + std::to_string(hello[8]) +
                  ", this accel-bench " + std::to_string(wire::kVersion) +
                  ": run the same accel-bench on every node");
  }
  const bool server_auth = hello[9] != 0, auth = !o.token.empty();
  if (server_auth && !auth) {
    throw Refused("rank 0's store at " + where +
                  " requires a shared secret: set ACCEL_STORE_TOKEN here as on rank 0");
  }
  if (!server_auth && auth) {
    throw Refused("rank 0's store at " + where +
                  " has no shared secret but ACCEL_STORE_TOKEN is set here: set the same on every "
                  "node, rank 0's included");
  }
  uint8_t nonce_c[wire::kNonce];
  wire::random_nonce(nonce_c);
  const uint8_t* nonce_s = hello + 10;
  Bytes reply(wire::kMagic, wire::kMagic + 8);
  reply.push_back(wire::kVersion);
  reply.push_back(auth ? 1 : 0);
  reply.insert(reply.end(), nonce_c, nonce_c + wire::kNonce);
  const auto m = wire::mac(o.token, "client", nonce_s, nonce_c);
  reply.insert(reply.end(), m.begin(), m.end());
  write_all(fd, reply.data(), reply.size(), deadline);
  uint8_t accept[wire::kServerAccept];
  try {
    read_exact(fd, accept, sizeof accept, deadline);
  } catch (const std::exception& e) {
    // No refusal byte: a server busy with connects let this one go. Retried.
    throw std::runtime_error("the store at " + where + " closed the connection during the "
                             "greeting (" + e.what() + "); a busy store does so, so it is tried again");
  }
  if (accept[0] == wire::kRefused) {
    throw Refused("rank 0's store at " + where + " refused this rank's shared secret: "
                  "ACCEL_STORE_TOKEN differs from rank 0's (set the same on every node)");
  }
  const auto proof = wire::mac(o.token, "server", nonce_c, nonce_s);
  if (accept[0] != wire::kOk || (auth && !wire::same_mac(proof.data(), accept + 1))) {
    throw Refused("the store at " + where + " did not prove it knows ACCEL_STORE_TOKEN");
  }
}

}  // namespace

NetStoreClient::NetStoreClient(const NetStoreOptions& options) : opts_(options) {
  open(deadline_after(opts_.timeout));
}

NetStoreClient::~NetStoreClient() { close(); }

void NetStoreClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void NetStoreClient::open(Clock::time_point deadline) {
  const std::string where = opts_.host + ":" + std::to_string(opts_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  std::string error = "nothing answered";
  int attempts = 0;
  // Rank 0 may not listen yet, or be busy: try every address until the deadline.
  for (;;) {
    addrinfo* res = nullptr;
    const std::string service = std::to_string(opts_.port);
    if (int rc = ::getaddrinfo(opts_.host.c_str(), service.c_str(), &hints, &res); rc != 0) {
      error = std::string("cannot resolve: ") + ::gai_strerror(rc);
    } else {
      for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
        const int fd = connect_one(a, deadline, error);
        if (fd < 0) continue;
        try {
          handshake(fd, opts_, deadline);
          fd_ = fd;
        } catch (const Refused&) {
          ::close(fd);
          ::freeaddrinfo(res);
          throw;
        } catch (const std::exception& e) {
          error = e.what();
          ::close(fd);
        }
      }
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0) return;
    if (remaining_ms(deadline) == 0) {
      const auto ms = opts_.timeout.count();
      const std::string within = ms % 1000 == 0 ? std::to_string(ms / 1000) + " s"
                                                : std::to_string(ms) + " ms";
      throw std::runtime_error("could not reach the store at " + where + " within " + within +
                               ": " + error);
    }
    // Again after a pause that grows to a second, with jitter, so ranks let go
    // by a server busy with a flood of connects do not all come back at once.
    const int step = std::min(1000, 50 << std::min(attempts++, 5));  // 50, 100, ... 1000 ms
    const int pause = step / 2 + int(std::random_device{}() % unsigned(step / 2 + 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(pause, remaining_ms(deadline))));
  }
}

std::vector<uint8_t> NetStoreClient::call(uint8_t op, const std::vector<uint8_t>& request,
                                          std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  if (fd_ < 0) open(deadline);
  Bytes frame;
  wire::put_u32(frame, static_cast<uint32_t>(1 + request.size()));
  frame.push_back(op);
  frame.insert(frame.end(), request.begin(), request.end());
  Bytes body;
  try {
    write_all(fd_, frame.data(), frame.size(), deadline);
    uint8_t len[4];
    read_exact(fd_, len, 4, deadline);
    const uint32_t n = wire::get_u32(len);
    if (n == 0 || n > (1u << 30)) throw std::runtime_error("a malformed answer");
    body.resize(n);
    read_exact(fd_, body.data(), n, deadline);
  } catch (const std::exception& e) {
    close();  // what is left of the exchange would answer the next request
    throw std::runtime_error("store at " + opts_.host + ":" + std::to_string(opts_.port) + ": " +
                             e.what());
  }
  if (body[0] != wire::kOk) {
    wire::Reader r(body.data() + 1, body.size() - 1);
    throw std::runtime_error("store: " + r.string());
  }
  return Bytes(body.begin() + 1, body.end());
}

void NetStoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  if (value.size() + key.size() + 16 > opts_.max_frame_bytes) {
    throw std::runtime_error("store: the value of \"" + key + "\" is " + std::to_string(value.size()) +
                             " bytes, more than a store frame holds (" +
                             std::to_string(opts_.max_frame_bytes) + ")");
  }
  Bytes req;
  wire::put_string(req, key);
  wire::put_bytes(req, value);
  call(wire::kSet, req, opts_.timeout);
}

std::vector<uint8_t> NetStoreClient::get(const std::string& key) {
  Bytes req;
  wire::put_string(req, key);
  const auto out = call(wire::kGet, req, opts_.timeout);
  wire::Reader r(out.data(), out.size());
  return r.bytes();
}

int64_t NetStoreClient::add(const std::string& key, int64_t delta) {
  Bytes req;
  wire::put_string(req, key);
  wire::put_i64(req, delta);
  const auto out = call(wire::kAdd, req, opts_.timeout);
  wire::Reader r(out.data(), out.size());
  return r.i64();
}

std::vector<uint8_t> NetStoreClient::compare_set(const std::string& key,
                                                 const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  Bytes req;
  wire::put_string(req, key);
  wire::put_bytes(req, expected);
  wire::put_bytes(req, desired);
  const auto out = call(wire::kCompareSet, req, opts_.timeout);
  wire::Reader r(out.data(), out.size());
  return r.bytes();
}

bool NetStoreClient::check(const std::vector<std::string>& keys) {
  Bytes req;
  wire::put_i64(req, int64_t(keys.size()));
  for (const auto& k : keys) wire::put_string(req, k);
  const auto out = call(wire::kCheck, req, opts_.timeout);
  return !out.empty() && out[0] != 0;
}

bool NetStoreClient::delete_key(const std::string& key) {
  Bytes req;
  wire::put_string(req, key);
  const auto out = call(wire::kDelete, req, opts_.timeout);
  return !out.empty() && out[0] != 0;
}

int64_t NetStoreClient::num_keys() {
  const auto out = call(wire::kNumKeys, {}, opts_.timeout);
  wire::Reader r(out.data(), out.size());
  return r.i64();
}

void NetStoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Bytes req;
  wire::put_i64(req, int64_t(keys.size()));
  for (const auto& k : keys) wire::put_string(req, k);
  call(wire::kWait, req, timeout);
}

}  // namespace accel::dist
