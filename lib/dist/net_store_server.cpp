// The server of accel-bench's store: one thread, one poll loop over
// non-blocking sockets (accel/dist/net_store.h says why).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "accel/dist/net_store.h"
#include "net_store_wire.h"

namespace accel::dist {
namespace {

using Clock = std::chrono::steady_clock;
using wire::Bytes;

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST] = {0};
  if (::getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

// A client's greeting and proof are due this soon after it connects: a
// rank answers in microseconds, and a connection that says nothing must not
// hold a slot for the run's whole timeout.
constexpr std::chrono::milliseconds kHelloLimit{10000};
// Connections accepted per listener per turn of the loop: a flood of
// connects cannot keep the thread from reading the ranks' greetings.
constexpr int kAcceptsPerTurn = 64;
// Connections waiting to be accepted: a burst the loop has not reached yet
// queues here instead of having its SYNs dropped (a rank's retried after 1 s).
constexpr int kListenBacklog = 4096;
// Requests served per connection per turn of the loop, so one client sending
// many cannot hold the thread.
constexpr int kFramesPerTurn = 64;

}  // namespace

// One client connection (named, not in the anonymous namespace: Impl, a
// member of a class with linkage, holds them).
struct Conn {
  int fd = -1;
  bool ready = false;  // handshake done
  uint8_t nonce[wire::kNonce] = {0};
  Bytes in;                // bytes read; in[in_off..] not yet consumed
  std::size_t in_off = 0;
  Bytes out;
  std::size_t out_sent = 0;
  // Since when `in` has held bytes of a frame (or greeting) not yet complete.
  std::optional<Clock::time_point> partial_since;
  Clock::time_point opened;
  // A get or wait that waits for keys to exist.
  uint8_t waiting_op = 0;
  std::vector<std::string> waiting_keys;
  bool backlog = false;  // complete requests left for the next turn
  bool dead = false;
  std::size_t pending() const { return in.size() - in_off; }
  const uint8_t* data() const { return in.data() + in_off; }
  void consume(std::size_t n) {
    in_off += n;
    if (in_off == in.size()) {
      in.clear();
      in_off = 0;
    }
  }
  void compact() {
    if (in_off > 0) {
      in.erase(in.begin(), in.begin() + std::ptrdiff_t(in_off));
      in_off = 0;
    }
  }
};

namespace {

void keepalive(int fd) {
  // A peer that vanished without a FIN (a node's crash, a cut link) is found
  // within about a minute instead of TCP's default two hours.
  const int one = 1, idle = 30, interval = 10, count = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

struct NetStoreServer::Impl {
  NetStoreOptions opts;
  std::vector<int> listeners;
  std::vector<std::string> addrs;
  int port = 0;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> refused{0};
  std::unordered_map<std::string, Bytes> kv;
  std::vector<Conn> conns;
  // accept() ran out of file descriptors: listeners rest until then.
  std::optional<Clock::time_point> accept_paused_until;

  void bind_all();
  void loop();
  void accept_from(int listener);
  void evict_oldest_greeting();
  void refuse(Conn& c);
  void on_readable(Conn& c);
  void process(Conn& c);
  bool handshake(Conn& c);
  void handle(Conn& c, const uint8_t* body, std::size_t n);
  bool try_finish_wait(Conn& c);
  void notify_waiters();
  void flush(Conn& c);
  void drop(Conn& c) {
    dropped.fetch_add(1);
    shut(c);
  }
  static void shut(Conn& c) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    c.dead = true;
  }
  static void respond(Conn& c, uint8_t status, const Bytes& fields) {
    wire::put_u32(c.out, static_cast<uint32_t>(1 + fields.size()));
    c.out.push_back(status);
    c.out.insert(c.out.end(), fields.begin(), fields.end());
  }
  bool has(const std::string& k) const { return kv.count(k) != 0; }
};

void NetStoreServer::Impl::bind_all() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(opts.port);
  if (int rc = ::getaddrinfo(opts.host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    throw std::runtime_error("cannot resolve \"" + opts.host + "\": " + ::gai_strerror(rc));
  }
  std::vector<std::string> not_mine;
  std::string error;
  port = opts.port;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const std::string host = numeric_host(a->ai_addr, a->ai_addrlen);
    if (std::find(addrs.begin(), addrs.end(), host) != addrs.end()) continue;
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    // The port the first bind chose (port 0) is the port of every address.
    if (a->ai_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_port = htons(uint16_t(port));
    } else if (a->ai_family == AF_INET6) {
      reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_port = htons(uint16_t(port));
    }
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EADDRNOTAVAIL) {
        not_mine.push_back(host);
        continue;
      }
      ::freeaddrinfo(res);
      for (int l : listeners) ::close(l);
      if (err == EADDRINUSE) {
        throw std::runtime_error("port " + std::to_string(port) + " of " + host + " is in use");
      }
      throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                               std::strerror(err));
    }
    if (::listen(fd, kListenBacklog) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    if (port == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    }
    listeners.push_back(fd);
    addrs.push_back(host);
  }
  ::freeaddrinfo(res);
  if (listeners.empty()) {
    std::string names;
    for (const auto& h : not_mine) names += (names.empty() ? "" : ", ") + h;
    if (!not_mine.empty()) {
      throw std::runtime_error("\"" + opts.host + "\" (" + names +
                               ") is not an address of this machine: rank 0 hosts the store and "
                               "listens only there, so MASTER_ADDR must name rank 0's own interface");
    }
    throw std::runtime_error("cannot listen on \"" + opts.host + "\"" +
                             (error.empty() ? "" : ": " + error));
  }
}

// Drops the connection that has been in its greeting longest.
void NetStoreServer::Impl::evict_oldest_greeting() {
  Conn* oldest = nullptr;
  for (auto& c : conns) {
    if (!c.dead && !c.ready && (oldest == nullptr || c.opened < oldest->opened)) oldest = &c;
  }
  if (oldest != nullptr) drop(*oldest);
}

// The greeting failed the shared-secret check: say so (a refusal byte the
// client reads as such, not as a busy server) and close.
void NetStoreServer::Impl::refuse(Conn& c) {
  refused.fetch_add(1);
  uint8_t no[wire::kServerAccept] = {wire::kRefused};
  c.out.insert(c.out.end(), no, no + sizeof no);
  if (c.out_sent < c.out.size()) {
    [[maybe_unused]] const auto n =
        ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
  }
  drop(c);
}

void NetStoreServer::Impl::accept_from(int listener) {
  for (int accepted = 0; accepted < kAcceptsPerTurn; ++accepted) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The listener stays readable: rest instead of spinning on it.
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      }
      return;  // EAGAIN, or a connection that went away
    }
    std::size_t live = 0, greeting = 0;
    for (const auto& c : conns) {
      live += c.dead ? 0 : 1;
      greeting += (!c.dead && !c.ready) ? 1 : 0;
    }
    if (greeting >= std::size_t(opts.max_greeting)) {
      evict_oldest_greeting();
    } else if (live >= std::size_t(opts.max_connections)) {
      ::close(fd);
      dropped.fetch_add(1);
      continue;
    }
    keepalive(fd);
    Conn c;
    c.fd = fd;
    c.opened = Clock::now();
    c.partial_since = c.opened;  // the greeting is due
    wire::random_nonce(c.nonce);
    c.out.insert(c.out.end(), wire::kMagic, wire::kMagic + 8);
    c.out.push_back(wire::kVersion);
    c.out.push_back(opts.token.empty() ? 0 : 1);
    c.out.insert(c.out.end(), c.nonce, c.nonce + wire::kNonce);
    conns.push_back(std::move(c));
    flush(conns.back());
  }
}

bool NetStoreServer::Impl::handshake(Conn& c) {
  if (c.pending() >= 8 && std::memcmp(c.data(), wire::kMagic, 8) != 0) {
    drop(c);  // another protocol: no need to wait for the rest
    return false;
  }
  if (c.pending() < wire::kClientHello) return false;
  const uint8_t* p = c.data();
  const bool auth = !opts.token.empty();
  if (std::memcmp(p, wire::kMagic, 8) != 0) {
    drop(c);
    return false;
  }
  if (p[8] != wire::kVersion || p[9] != (auth ? 1 : 0)) {
    refuse(c);
    return false;
  }
  const uint8_t* nonce_c = p + 10;
  const auto want = wire::mac(opts.token, "client", c.nonce, nonce_c);
  if (auth && !wire::same_mac(want.data(), nonce_c + wire::kNonce)) {
    refuse(c);
    return false;
  }
  const auto proof = wire::mac(opts.token, "server", nonce_c, c.nonce);
  c.out.push_back(wire::kOk);
  c.out.insert(c.out.end(), proof.begin(), proof.end());
  c.consume(wire::kClientHello);
  c.ready = true;
  return true;
}

bool NetStoreServer::Impl::try_finish_wait(Conn& c) {
  for (const auto& k : c.waiting_keys) {
    if (!has(k)) return false;
  }
  Bytes f;
  if (c.waiting_op == wire::kGet) wire::put_bytes(f, kv[c.waiting_keys.front()]);
  respond(c, wire::kOk, f);
  c.waiting_op = 0;
  c.waiting_keys.clear();
  return true;
}

void NetStoreServer::Impl::handle(Conn& c, const uint8_t* body, std::size_t n) {
  wire::Reader r(body, n);
  const uint8_t op = r.u8();
  Bytes f;
  bool changed = false;
  switch (op) {
    case wire::kSet: {
      const auto key = r.string();
      kv[key] = r.bytes();
      changed = true;
      break;
    }
    case wire::kGet:
    case wire::kWait: {
      if (op == wire::kGet) {
        c.waiting_keys.push_back(r.string());
      } else {
        const int64_t count = r.i64();
        if (count < 0 || count > int64_t(n)) throw std::runtime_error("bad key count");
        for (int64_t i = 0; i < count; ++i) c.waiting_keys.push_back(r.string());
      }
      if (!r.done()) throw std::runtime_error("trailing bytes");
      c.waiting_op = op;
      try_finish_wait(c);
      return;
    }
    case wire::kAdd: {
      const auto key = r.string();
      const int64_t delta = r.i64();
      int64_t value = 0;
      if (auto it = kv.find(key); it != kv.end()) {
        const char* b = reinterpret_cast<const char*>(it->second.data());
        const auto [end, ec] = std::from_chars(b, b + it->second.size(), value);
        if (ec != std::errc() || end != b + it->second.size()) {
          Bytes e;
          wire::put_string(e, "add: the value of \"" + key + "\" is not an integer");
          respond(c, wire::kError, e);
          return;
        }
      }
      if (__builtin_add_overflow(value, delta, &value)) {
        Bytes e;
        wire::put_string(e, "add: \"" + key + "\" would overflow a 64-bit integer");
        respond(c, wire::kError, e);
        return;
      }
      const auto s = std::to_string(value);
      kv[key] = Bytes(s.begin(), s.end());
      wire::put_i64(f, value);
      changed = true;
      break;
    }
    case wire::kCompareSet: {
      const auto key = r.string();
      const auto expected = r.bytes();
      auto desired = r.bytes();
      auto it = kv.find(key);
      if (it == kv.end()) {
        if (expected.empty()) {
          kv[key] = desired;
          changed = true;
          wire::put_bytes(f, desired);
        } else {
          wire::put_bytes(f, expected);
        }
      } else if (it->second == expected) {
        it->second = desired;
        changed = true;
        wire::put_bytes(f, desired);
      } else {
        wire::put_bytes(f, it->second);
      }
      break;
    }
    case wire::kCheck: {
      const int64_t count = r.i64();
      if (count < 0 || count > int64_t(n)) throw std::runtime_error("bad key count");
      bool all = true;
      for (int64_t i = 0; i < count; ++i) all = has(r.string()) && all;
      f.push_back(all ? 1 : 0);
      break;
    }
    case wire::kDelete:
      f.push_back(kv.erase(r.string()) > 0 ? 1 : 0);
      break;
    case wire::kNumKeys:
      wire::put_i64(f, int64_t(kv.size()));
      break;
    default:
      throw std::runtime_error("unknown op");
  }
  if (!r.done()) throw std::runtime_error("trailing bytes");
  respond(c, wire::kOk, f);
  if (changed) notify_waiters();
}

void NetStoreServer::Impl::notify_waiters() {
  for (auto& w : conns) {
    if (!w.dead && w.waiting_op != 0 && try_finish_wait(w)) {
      flush(w);
      process(w);  // requests it sent behind the wait
    }
  }
}

void NetStoreServer::Impl::process(Conn& c) {
  if (!c.ready && !handshake(c)) return;
  // One request at a time per connection (the next waits behind a get or
  // wait), and a bounded number per turn.
  int served = 0;
  c.backlog = false;
  while (!c.dead && c.waiting_op == 0 && c.pending() >= 4) {
    const uint32_t len = wire::get_u32(c.data());
    if (len == 0 || len > opts.max_frame_bytes) {
      drop(c);
      return;
    }
    if (c.pending() < 4 + std::size_t(len)) break;
    if (served++ == kFramesPerTurn) {
      c.backlog = true;
      break;
    }
    try {
      handle(c, c.data() + 4, len);
    } catch (const std::exception&) {  // a malformed frame: not our protocol
      drop(c);
      return;
    }
    c.consume(4 + std::size_t(len));
  }
  if (c.dead) return;
  c.compact();
  if (c.pending() == 0 || c.backlog) {
    c.partial_since.reset();
  } else if (!c.partial_since) {
    c.partial_since = Clock::now();
  }
  flush(c);
}

void NetStoreServer::Impl::on_readable(Conn& c) {
  uint8_t buf[65536];
  bool eof = false;
  for (;;) {
    // Before the handshake only the greeting is read, so a connection that
    // has proved nothing holds at most that much.
    const std::size_t want =
        c.ready ? sizeof buf : std::min(sizeof buf, wire::kClientHello - std::min(c.pending(), wire::kClientHello));
    if (want == 0) break;
    const ssize_t got = ::recv(c.fd, buf, want, 0);
    if (got > 0) {
      c.in.insert(c.in.end(), buf, buf + got);
      // A client piles up requests behind a wait only if it is not ours.
      if (c.pending() > opts.max_frame_bytes + 8) {
        drop(c);
        return;
      }
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
    break;
  }
  process(c);  // what arrived before an end of file is served too
  if (eof && !c.dead) shut(c);  // the client left
}

void NetStoreServer::Impl::flush(Conn& c) {
  while (!c.dead && c.out_sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                             MSG_NOSIGNAL);
    if (n > 0) {
      c.out_sent += std::size_t(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      shut(c);
      return;
    }
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
  } else if (c.out.size() - c.out_sent > 2 * opts.max_frame_bytes) {
    drop(c);  // it does not read its answers
  }
}

void NetStoreServer::Impl::loop() {
  std::vector<pollfd> fds;
  for (;;) {
    auto now = Clock::now();
    const bool listening = !accept_paused_until || now >= *accept_paused_until;
    if (listening) accept_paused_until.reset();
    bool backlog = false;
    fds.clear();
    fds.push_back({wake[0], POLLIN, 0});
    for (int l : listeners) fds.push_back({l, short(listening ? POLLIN : 0), 0});
    for (const auto& c : conns) {
      short ev = POLLIN;
      if (c.out_sent < c.out.size()) ev |= POLLOUT;
      fds.push_back({c.fd, ev, 0});
      backlog = backlog || c.backlog;
    }
    // Wake at least every 100 ms to drop connections stalled past their limit.
    const int rc = ::poll(fds.data(), fds.size(), backlog ? 0 : 100);
    if (rc < 0 && errno != EINTR) {
      std::fprintf(stderr, "accel-bench store: poll failed (%s); the store stops serving\n",
                   std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;  // stop
    const std::size_t first_conn = 1 + listeners.size();
    const std::size_t n_conns = fds.size() - first_conn;  // accepted below come after
    try {
      for (std::size_t i = 0; listening && i < listeners.size(); ++i) {
        if (fds[1 + i].revents & POLLIN) accept_from(listeners[i]);
      }
    } catch (const std::exception&) {  // no nonce for a new connection: it waits
    }
    for (std::size_t i = 0; i < n_conns; ++i) {
      Conn& c = conns[i];
      const short ev = fds[first_conn + i].revents;
      if (c.dead || (ev == 0 && !c.backlog)) continue;
      try {
        if (ev & POLLOUT) flush(c);
        if (!c.dead && (ev & (POLLIN | POLLHUP | POLLERR))) {
          on_readable(c);
        } else if (!c.dead && c.backlog) {
          process(c);
        }
      } catch (const std::exception&) {  // out of memory, no random bytes: this connection goes
        drop(c);
      }
    }
    now = Clock::now();
    for (auto& c : conns) {
      if (c.dead || !c.partial_since) continue;
      const auto limit = c.ready ? opts.timeout : std::min(opts.timeout, kHelloLimit);
      if (now - *c.partial_since > limit) drop(c);
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return c.dead; }),
                conns.end());
  }
}

NetStoreServer::NetStoreServer(const NetStoreOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->opts = options;
  // Descriptors for every connection it may hold at once: the soft limit
  // (often 1024) raised towards the hard one, as servers do.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    const rlim_t want = rlim_t(options.max_connections) + 256;
    if (lim.rlim_cur < want && lim.rlim_cur < lim.rlim_max) {
      lim.rlim_cur = std::min(want, lim.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &lim);
    }
  }
  impl_->bind_all();
  if (::pipe2(impl_->wake, O_CLOEXEC) != 0) {
    for (int l : impl_->listeners) ::close(l);
    throw std::runtime_error(std::string("store: pipe: ") + std::strerror(errno));
  }
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

NetStoreServer::~NetStoreServer() {
  const char x = 1;
  [[maybe_unused]] const auto n = ::write(impl_->wake[1], &x, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  for (auto& c : impl_->conns) Impl::shut(c);
  for (int l : impl_->listeners) ::close(l);
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

int NetStoreServer::port() const { return impl_->port; }
std::vector<std::string> NetStoreServer::addresses() const { return impl_->addrs; }
int64_t NetStoreServer::dropped() const { return impl_->dropped.load(); }

int64_t NetStoreServer::refused() const { return impl_->refused.load(); }

}  // namespace accel::dist
