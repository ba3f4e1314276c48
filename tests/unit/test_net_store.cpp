// accel-bench's store for multi-node rendezvous (accel/dist/net_store.h):
// c10d's semantics, where it listens, the shared secret, and clients that
// stall, overflow or speak another protocol. Raw sockets play the bad clients.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "../lib/dist/net_store_wire.h"
#include "accel/dist/net_store.h"

using accel::dist::NetStoreClient;
using accel::dist::NetStoreOptions;
using accel::dist::NetStoreServer;
namespace wire = accel::dist::wire;
using namespace std::chrono_literals;

namespace {

NetStoreOptions opts(const std::string& token = "", std::chrono::milliseconds timeout = 10s) {
  NetStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = token;
  o.timeout = timeout;
  return o;
}

NetStoreOptions client_of(const NetStoreServer& s, NetStoreOptions o) {
  o.port = s.port();
  return o;
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// A plain TCP connection to 127.0.0.1:port (-1 if refused).
int raw_connect(int port, const char* addr = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, addr, &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::vector<uint8_t>& b) {
  REQUIRE(::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == ssize_t(b.size()));
}

// Reads what arrives within `limit`; true once the server closed the connection.
bool closed_within(int fd, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  uint8_t buf[256];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

// A raw connection that completes the handshake of a store without a secret.
int raw_handshaken(int port) {
  const int fd = raw_connect(port);
  REQUIRE(fd >= 0);
  uint8_t hello[wire::kServerHello];
  REQUIRE(::recv(fd, hello, sizeof hello, MSG_WAITALL) == ssize_t(sizeof hello));
  std::vector<uint8_t> reply(wire::kMagic, wire::kMagic + 8);
  reply.push_back(wire::kVersion);
  reply.push_back(0);
  reply.resize(wire::kClientHello, 7);  // any nonce, a zero-secret MAC is not checked
  send_all(fd, reply);
  uint8_t accept[wire::kServerAccept];
  REQUIRE(::recv(fd, accept, sizeof accept, MSG_WAITALL) == ssize_t(sizeof accept));
  REQUIRE(accept[0] == wire::kOk);
  return fd;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("net store: set, get, add, compare_set, check, delete and num_keys follow c10d's semantics") {
  NetStoreServer server(opts());
  NetStoreClient c(client_of(server, opts()));
  c.set("a", bytes("hello"));
  CHECK(text(c.get("a")) == "hello");
  CHECK(c.add("n", 3) == 3);
  CHECK(c.add("n", -1) == 2);
  CHECK(text(c.get("n")) == "2");  // counters are decimal text, as TCPStore's
  CHECK(c.check({"a", "n"}));
  CHECK_FALSE(c.check({"a", "missing"}));
  // compare_set: a missing key equals an empty expected value.
  CHECK(text(c.compare_set("cs", {}, bytes("x"))) == "x");
  CHECK(text(c.compare_set("cs", bytes("y"), bytes("z"))) == "x");
  CHECK(text(c.compare_set("cs", bytes("x"), bytes("z"))) == "z");
  CHECK(text(c.compare_set("none", bytes("e"), bytes("d"))) == "e");
  CHECK_FALSE(c.check({"none"}));
  CHECK(c.num_keys() == 3);
  CHECK(c.delete_key("a"));
  CHECK_FALSE(c.delete_key("a"));
  CHECK(c.num_keys() == 2);
  c.set("word", bytes("abc"));
  CHECK(error_of([&] { c.add("word", 1); }).find("not an integer") != std::string::npos);
  CHECK(text(c.get("word")) == "abc");  // the connection survives a refused request
}

TEST_CASE("net store: get and wait wait until another client sets the keys, and time out naming the store") {
  NetStoreServer server(opts());
  NetStoreClient a(client_of(server, opts()));
  NetStoreClient b(client_of(server, opts()));
  auto got = std::async(std::launch::async, [&] { return text(a.get("late")); });
  auto waited = std::async(std::launch::async, [&] {
    NetStoreClient w(client_of(server, opts()));
    w.wait({"late", "later"}, 10s);
    return true;
  });
  std::this_thread::sleep_for(100ms);
  b.set("late", bytes("v"));
  REQUIRE(got.wait_for(10s) == std::future_status::ready);
  CHECK(got.get() == "v");
  b.add("later", 1);
  REQUIRE(waited.wait_for(10s) == std::future_status::ready);
  CHECK(waited.get());
  NetStoreClient t(client_of(server, opts("", 200ms)));
  const auto e = error_of([&] { t.get("never"); });
  CHECK(e.find("127.0.0.1:" + std::to_string(server.port())) != std::string::npos);
  CHECK(e.find("timed out") != std::string::npos);
  t.set("after", bytes("1"));  // a timed-out call leaves a fresh connection usable
  CHECK(text(t.get("after")) == "1");
}

TEST_CASE("net store: a client stalled mid-request delays no one and is dropped after the timeout") {
  NetStoreServer server(opts("", 500ms));
  const int stalled = raw_handshaken(server.port());
  // A frame header that promises 100 bytes, and 3 of them.
  std::vector<uint8_t> half;
  wire::put_u32(half, 100);
  half.insert(half.end(), {wire::kSet, 0, 0});
  send_all(stalled, half);
  const int silent = raw_connect(server.port());  // connects, never says hello
  REQUIRE(silent >= 0);
  NetStoreClient c(client_of(server, opts()));
  c.set("k", bytes("v"));  // served at once, beside the stalled ones
  CHECK(text(c.get("k")) == "v");
  CHECK(closed_within(stalled, 5s));
  CHECK(closed_within(silent, 5s));
  CHECK(server.dropped() == 2);
  CHECK(c.add("n", 1) == 1);
  ::close(stalled);
  ::close(silent);
}

TEST_CASE("net store: stopping the server never waits for a stalled client") {
  auto server = std::make_unique<NetStoreServer>(opts("", 600s));
  const int stalled = raw_handshaken(server->port());
  send_all(stalled, {0, 1});  // half a length
  const int silent = raw_connect(server->port());
  auto stopped = std::async(std::launch::async, [&] { server.reset(); });
  CHECK(stopped.wait_for(30s) == std::future_status::ready);  // a hang, not a timing
  CHECK(closed_within(stalled, 5s));
  ::close(stalled);
  ::close(silent);
}

TEST_CASE("net store: other protocols and frames over the size limit are dropped") {
  auto o = opts();
  o.max_frame_bytes = 1024;
  NetStoreServer server(o);
  const int http = raw_connect(server.port());
  std::string req = "GET / HTTP/1.1\r\nHost: x\r\n";
  req.resize(wire::kClientHello + 10, 'x');
  send_all(http, bytes(req));
  CHECK(closed_within(http, 5s));
  const int big = raw_handshaken(server.port());
  std::vector<uint8_t> frame;
  wire::put_u32(frame, 1u << 20);
  send_all(big, frame);
  CHECK(closed_within(big, 5s));
  const int junk = raw_handshaken(server.port());
  std::vector<uint8_t> bad;
  wire::put_u32(bad, 2);
  bad.insert(bad.end(), {99, 0});  // no such op
  send_all(junk, bad);
  CHECK(closed_within(junk, 5s));
  CHECK(server.dropped() == 3);
  ::close(http);
  ::close(big);
  ::close(junk);
  NetStoreClient c(client_of(server, opts()));
  std::vector<uint8_t> large(2048, 1);
  // Its own client's oversized request breaks only its own connection.
  CHECK(error_of([&] { c.set("big", large); }).find("store at") != std::string::npos);
  c.set("small", bytes("ok"));
  CHECK(text(c.get("small")) == "ok");
}

TEST_CASE("net store: with a shared secret, clients without it or with another are refused") {
  const std::string secret = "0123456789abcdef-secret";
  NetStoreServer server(opts(secret));
  NetStoreClient good(client_of(server, opts(secret)));
  good.set("job", bytes("keys"));
  CHECK(text(good.get("job")) == "keys");

  const auto wrong = error_of([&] { NetStoreClient c(client_of(server, opts("another-secret-0123456"))); });
  CHECK(wrong.find("refused this rank's shared secret") != std::string::npos);
  CHECK(wrong.find("ACCEL_STORE_TOKEN") != std::string::npos);
  const auto none = error_of([&] { NetStoreClient c(client_of(server, opts())); });
  CHECK(none.find("requires a shared secret") != std::string::npos);
  // A raw client that skips the proof reads the refusal byte, then the close.
  const int raw = raw_connect(server.port());
  uint8_t hello[wire::kServerHello];
  REQUIRE(::recv(raw, hello, sizeof hello, MSG_WAITALL) == ssize_t(sizeof hello));
  CHECK(hello[9] == 1);
  std::vector<uint8_t> reply(wire::kMagic, wire::kMagic + 8);
  reply.push_back(wire::kVersion);
  reply.push_back(1);
  reply.resize(wire::kClientHello, 0);
  send_all(raw, reply);
  uint8_t refusal[wire::kServerAccept];
  REQUIRE(::recv(raw, refusal, sizeof refusal, MSG_WAITALL) == ssize_t(sizeof refusal));
  CHECK(refusal[0] == wire::kRefused);
  CHECK(closed_within(raw, 5s));
  ::close(raw);
  CHECK(server.dropped() >= 2);
  // The wrong secret and the skipped proof, counted for rank 0's message (a
  // client without a secret leaves before it greets).
  CHECK(server.refused() == 2);

  NetStoreServer open(opts());
  const auto extra = error_of([&] { NetStoreClient c(client_of(open, opts(secret))); });
  CHECK(extra.find("has no shared secret") != std::string::npos);
}

TEST_CASE("net store: listens only on the address it is given and refuses one not of this machine") {
  auto o = opts();
  o.host = "127.0.0.2";  // all of 127/8 is this machine's loopback
  NetStoreServer server(o);
  CHECK(server.addresses() == std::vector<std::string>{"127.0.0.2"});
  CHECK(raw_connect(server.port(), "127.0.0.1") < 0);  // nothing on the other address
  const int fd = raw_connect(server.port(), "127.0.0.2");
  CHECK(fd >= 0);
  if (fd >= 0) ::close(fd);

  auto away = opts();
  away.host = "192.0.2.7";  // TEST-NET-1 (RFC 5737): no machine's own address
  const auto e = error_of([&] { NetStoreServer s(away); });
  CHECK(e.find("192.0.2.7") != std::string::npos);
  CHECK(e.find("not an address of this machine") != std::string::npos);

  auto same = opts();
  same.port = server.port();
  same.host = "127.0.0.2";
  CHECK(error_of([&] { NetStoreServer s(same); }).find("in use") != std::string::npos);
}

TEST_CASE("net store: a client waits for a server that starts late, and names what it could not reach") {
  // Find a free port, then start the server on it after the client began.
  int port = 0;
  { NetStoreServer probe(opts()); port = probe.port(); }
  auto o = opts();
  o.port = port;
  auto started = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    return std::make_unique<NetStoreServer>(o);
  });
  NetStoreClient c(o);
  auto server = started.get();
  c.set("x", bytes("1"));
  CHECK(text(c.get("x")) == "1");
  server.reset();
  auto gone = opts("", 300ms);
  gone.port = port;
  const auto e = error_of([&] { NetStoreClient late(gone); });
  CHECK(e.find("could not reach the store at 127.0.0.1:" + std::to_string(port)) != std::string::npos);
}

TEST_CASE("net store: idle connects beyond the greeting limit evict the oldest instead of locking ranks out") {
  auto o = opts();
  o.max_greeting = 32;
  NetStoreServer server(o);
  std::vector<int> idle;
  for (int i = 0; i < 80; ++i) {  // more than the 32 connections allowed to be greeting at once
    const int fd = raw_connect(server.port());
    REQUIRE(fd >= 0);
    idle.push_back(fd);
  }
  NetStoreClient c(client_of(server, opts()));  // still gets in, at once
  c.set("in", bytes("yes"));
  CHECK(text(c.get("in")) == "yes");
  CHECK(server.dropped() >= 80 - 32);
  CHECK(closed_within(idle.front(), 5s));  // the oldest went first
  for (int fd : idle) ::close(fd);
}

TEST_CASE("net store: a set releases a chain of waiters, and a client that left mid-wait hurts no one") {
  NetStoreServer server(opts());
  // A client that waits, then leaves before the key exists.
  {
    NetStoreClient gone(client_of(server, opts("", 100ms)));
    CHECK(error_of([&] { gone.get("k1"); }).find("timed out") != std::string::npos);
  }
  // b waits for k1 and then sets k2; c waits for k2.
  auto b = std::async(std::launch::async, [&] {
    NetStoreClient x(client_of(server, opts()));
    const auto v = x.get("k1");
    x.set("k2", v);
    return text(x.get("k2"));
  });
  auto c = std::async(std::launch::async, [&] {
    NetStoreClient x(client_of(server, opts("", 0ms)));  // c10d's kNoTimeout: no deadline
    return text(x.get("k2"));
  });
  std::this_thread::sleep_for(100ms);
  NetStoreClient a(client_of(server, opts()));
  a.set("k1", bytes("chain"));
  REQUIRE(b.wait_for(10s) == std::future_status::ready);
  REQUIRE(c.wait_for(10s) == std::future_status::ready);
  CHECK(b.get() == "chain");
  CHECK(c.get() == "chain");
  CHECK(server.dropped() == 0);
}

TEST_CASE("net store: a server that cannot prove the shared secret is refused by the client") {
  // A listener that greets like a store asking for a secret, then answers the
  // client's proof with a made-up one.
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(lfd, 4) == 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  auto fake = std::async(std::launch::async, [&] {
    const int fd = ::accept(lfd, nullptr, nullptr);
    std::vector<uint8_t> hello(wire::kMagic, wire::kMagic + 8);
    hello.push_back(wire::kVersion);
    hello.push_back(1);
    hello.resize(wire::kServerHello, 3);
    ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    uint8_t buf[wire::kClientHello];
    ::recv(fd, buf, sizeof buf, MSG_WAITALL);
    std::vector<uint8_t> accept(wire::kServerAccept, 9);
    accept[0] = wire::kOk;
    ::send(fd, accept.data(), accept.size(), MSG_NOSIGNAL);
    return fd;
  });
  auto o = opts("0123456789abcdef-secret", 2s);
  o.port = ntohs(a.sin_port);
  CHECK(error_of([&] { NetStoreClient c(o); }).find("did not prove it knows ACCEL_STORE_TOKEN") !=
        std::string::npos);
  ::close(fake.get());
  ::close(lfd);
}

TEST_CASE("net store: a flood of connects slows the ranks' rendezvous but never fails it, and a wrong secret is still refused at once") {
  const std::string secret = "flood-secret-0123456789abc";
  NetStoreServer server(opts(secret));
  std::atomic<bool> stop{false};
  std::atomic<long> connects{0};
  // Three threads opening connections (without waiting for the server, as a
  // flood does not), each held 50 ms and closed, and 64 more that connect and
  // say nothing: the greetings in flight are always as many as the server
  // allows. The flood is paced at 8,000 connects a second a thread, 24,000 in
  // all (what the server's greeting limit is sized for), so it is as strong
  // on a fast machine as on a slow one: unpaced, a fast host's threads reached
  // 58,000 a second on 2 cores and starved the server's thread of the CPU
  // itself, which no server design survives.
  std::vector<std::thread> flood;
  for (int t = 0; t < 3; ++t) {
    flood.emplace_back([&] {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(uint16_t(server.port()));
      ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
      std::deque<std::pair<int, std::chrono::steady_clock::time_point>> open;
      constexpr auto kGap = std::chrono::microseconds(125);  // 8,000 a second
      auto next = std::chrono::steady_clock::now();
      while (!stop) {
        if (const auto now = std::chrono::steady_clock::now(); now < next) {
          std::this_thread::sleep_until(next);
        } else if (now - next > 100ms) {
          next = now;  // fell behind (descheduled): no burst to catch up
        }
        next += kGap;
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 || errno == EINPROGRESS) {
          ++connects;
          open.emplace_back(fd, std::chrono::steady_clock::now());
        } else {
          ::close(fd);
          std::this_thread::sleep_for(1ms);  // out of ports or descriptors: let some close
        }
        while (!open.empty() && (open.size() > 400 ||
                                 std::chrono::steady_clock::now() - open.front().second > 50ms)) {
          ::close(open.front().first);
          open.pop_front();
        }
      }
      for (const auto& [fd, when] : open) ::close(fd);
    });
  }
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    if (const int fd = raw_connect(server.port()); fd >= 0) idle.push_back(fd);
  }
  std::this_thread::sleep_for(1s);
  const long before = connects.load();
  // Four ranks meet in it during the flood.
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      NetStoreClient c(client_of(server, opts(secret, 30s)));
      c.set("rank" + std::to_string(r), bytes("here"));
      c.wait({"rank0", "rank1", "rank2", "rank3"}, 30s);
      return text(c.get("rank" + std::to_string((r + 1) % 4)));
    }));
  }
  for (auto& f : ranks) CHECK(f.get() == "here");
  // A rank with another secret is told so, not left to retry until its deadline.
  const auto t0 = std::chrono::steady_clock::now();
  const auto wrong = error_of([&] { NetStoreClient c(client_of(server, opts("another-secret-0123456", 30s))); });
  CHECK(wrong.find("refused this rank's shared secret") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
  stop = true;
  for (auto& t : flood) t.join();
  for (int fd : idle) ::close(fd);
  MESSAGE("connects in the second before the ranks came: " << before << ", in all: " << connects.load());
  CHECK(before > 5000);  // it was a flood
}
