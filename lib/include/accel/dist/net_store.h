// accel-bench's own key-value store for the rendezvous of multi-node jobs.
//
// c10d's TCPStore, which LibTorch hosts on rank 0, listens on every interface
// (1.13's options take a port, not an address), has no authentication, and
// its classic server reads a request to its end before it serves the next
// one: a single client that sends half a request and holds its socket stalls
// the whole job, and keeps a finished rank 0 from exiting. This store does
// what the rendezvous needs (the ranks' claims and counts, Gloo's and NCCL's
// address exchange, through the c10d::Store adapter in comm.cpp) and no more:
//
// - the server listens only on the addresses master_addr names, refusing an
//   address that is not this machine's;
// - it serves every connection from one poll loop over non-blocking sockets,
//   so a slow or stalled client delays nobody; a connection that leaves a
//   request or its handshake half-sent past the timeout, sends a frame over
//   the size limit or speaks another protocol is dropped, and stopping the
//   server never waits for a client;
// - with a shared secret (ACCEL_STORE_TOKEN on every node) each connection
//   proves it knows the secret before it may read or write a key, and the
//   server proves it back (HMAC-SHA256 over fresh nonces of both sides);
//   without one it still speaks only to clients of its own protocol;
// - every client operation has a deadline (the run's runtime.timeout_s).
//
// It is no TLS: what travels after the handshake is neither encrypted nor
// authenticated message by message, and Gloo's and NCCL's own connections
// are unauthenticated. A trusted network is still the place for a job.
// Torch-free (POSIX sockets, OpenSSL's HMAC), so it compiles outside the PCH.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accel::dist {

struct NetStoreOptions {
  std::string host = "127.0.0.1";  // server: the name or address to listen on; client: to reach
  int port = 0;                    // server: 0 picks a free port (tests)
  std::string token;               // shared secret; "" = no authentication
  std::chrono::milliseconds timeout{std::chrono::seconds(180)};
  // Server: frames larger than this drop their connection.
  std::size_t max_frame_bytes = 16u << 20;
  // Server: connections at once (the job's ranks, a few clones each, and
  // whatever else is connecting).
  int max_connections = 4096;
  // Server: connections still in their greeting at once. A new one beyond
  // this evicts the oldest, so idle connects cannot lock the ranks out; the
  // many it allows keep a flood of connects from evicting a rank's greeting
  // before its answer (a round trip) arrives: at 24,000 connects a second,
  // 2048 greetings take 85 ms to cycle.
  int max_greeting = 2048;
};

// The server side, run by rank 0: a thread serving every connection until
// destroyed. Construction binds and listens (throws std::runtime_error with
// what failed: "... is not an address of this machine", "port N is in use").
class NetStoreServer {
 public:
  explicit NetStoreServer(const NetStoreOptions& options);
  ~NetStoreServer();  // never waits on a client
  NetStoreServer(const NetStoreServer&) = delete;
  NetStoreServer& operator=(const NetStoreServer&) = delete;

  int port() const;
  // The numeric addresses it listens on ("10.0.0.1", "::1").
  std::vector<std::string> addresses() const;
  // Connections dropped so far for a bad handshake, a wrong secret, an
  // oversized frame or a stall (for tests and the log).
  int64_t dropped() const;
  // Of those, greetings refused for a shared secret (ACCEL_STORE_TOKEN) that
  // is not rank 0's, or for its absence: rank 0's message names them.
  int64_t refused() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One connection to the server. Not thread-safe (the c10d adapter locks).
// Every call throws std::runtime_error when it cannot finish within the
// timeout or the connection breaks; a timed-out call leaves the connection
// closed, and the next call opens a new one.
class NetStoreClient {
 public:
  explicit NetStoreClient(const NetStoreOptions& options);  // connects, retrying until the timeout
  ~NetStoreClient();
  NetStoreClient(const NetStoreClient&) = delete;
  NetStoreClient& operator=(const NetStoreClient&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value);
  // Waits until the key exists.
  std::vector<uint8_t> get(const std::string& key);
  // c10d's semantics: the key's value is a decimal integer; returns the sum.
  int64_t add(const std::string& key, int64_t delta);
  // c10d's semantics: sets `desired` if the current value equals `expected`
  // (a missing key equals an empty `expected`); returns the value after.
  std::vector<uint8_t> compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                   const std::vector<uint8_t>& desired);
  bool check(const std::vector<std::string>& keys);
  bool delete_key(const std::string& key);
  int64_t num_keys();
  // Waits until every key exists, for at most `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  const NetStoreOptions& options() const { return opts_; }
  void set_timeout(std::chrono::milliseconds t) { opts_.timeout = t; }

 private:
  std::vector<uint8_t> call(uint8_t op, const std::vector<uint8_t>& request,
                            std::chrono::milliseconds timeout);
  void open(std::chrono::steady_clock::time_point deadline);
  void close();

  NetStoreOptions opts_;
  int fd_ = -1;
};

}  // namespace accel::dist
