// The wire format of accel-bench's store (accel/dist/net_store.h), shared by
// its server and client.
//
// Handshake, before any request:
//   server -> client  "ACCELSTR" version(u8) auth(u8) nonce_s[32]
//   client -> server  "ACCELSTR" version(u8) auth(u8) nonce_c[32] mac_c[32]
//   server -> client  ok(u8 = 0) mac_s[32], or refused(u8 = 2) and 32 zero
//                     bytes before it closes: the secret (or whether one is
//                     set) differs. A connection closed without either was
//                     let go by a busy server: the client connects again.
// with mac_c = HMAC-SHA256(secret, "client" nonce_s nonce_c) and
// mac_s = HMAC-SHA256(secret, "server" nonce_c nonce_s) where a secret is set
// (zeros otherwise); both sides must agree whether one is.
// Then frames: u32 length (little-endian, of what follows) and a body:
//   request  op(u8) fields...      response  status(u8) fields...
// A field is a byte string (u32 length + bytes) or an i64 (little-endian).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace accel::dist::wire {

inline constexpr char kMagic[8] = {'A', 'C', 'C', 'E', 'L', 'S', 'T', 'R'};
inline constexpr uint8_t kVersion = 1;
inline constexpr std::size_t kNonce = 32, kMac = 32;
inline constexpr std::size_t kServerHello = 8 + 1 + 1 + kNonce;
inline constexpr std::size_t kClientHello = 8 + 1 + 1 + kNonce + kMac;
inline constexpr std::size_t kServerAccept = 1 + kMac;

enum Op : uint8_t {
  kSet = 1,
  kGet = 2,         // waits until the key exists
  kAdd = 3,
  kCompareSet = 4,
  kCheck = 5,
  kDelete = 6,
  kNumKeys = 7,
  kWait = 8,        // waits until every key exists
};
enum Status : uint8_t { kOk = 0, kError = 1, kRefused = 2 };

using Bytes = std::vector<uint8_t>;
using Mac = std::array<uint8_t, kMac>;

// HMAC-SHA256(secret, label || a || b); zeros when the secret is empty.
Mac mac(const std::string& secret, const char* label, const uint8_t* a, const uint8_t* b);
// Constant-time equality of two MACs.
bool same_mac(const uint8_t* a, const uint8_t* b);
// kNonce random bytes from the OS's generator.
void random_nonce(uint8_t* out);

inline void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
inline void put_i64(Bytes& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(u >> (8 * i)));
}
inline void put_bytes(Bytes& out, const uint8_t* p, std::size_t n) {
  put_u32(out, static_cast<uint32_t>(n));
  out.insert(out.end(), p, p + n);
}
inline void put_bytes(Bytes& out, const Bytes& b) { put_bytes(out, b.data(), b.size()); }
inline void put_string(Bytes& out, const std::string& s) {
  put_bytes(out, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
inline uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Reads the fields of one frame body; throws std::runtime_error past its end.
class Reader {
 public:
  Reader(const uint8_t* p, std::size_t n) : p_(p), end_(p + n) {}
  uint8_t u8() {
    need(1);
    return *p_++;
  }
  int64_t i64() {
    need(8);
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= uint64_t(p_[i]) << (8 * i);
    p_ += 8;
    return static_cast<int64_t>(u);
  }
  Bytes bytes() {
    need(4);
    const uint32_t n = get_u32(p_);
    p_ += 4;
    need(n);
    Bytes b(p_, p_ + n);
    p_ += n;
    return b;
  }
  std::string string() {
    const auto b = bytes();
    return std::string(b.begin(), b.end());
  }
  bool done() const { return p_ == end_; }

 private:
  void need(std::size_t n) const {
    if (std::size_t(end_ - p_) < n) throw std::runtime_error("truncated store frame");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace accel::dist::wire
