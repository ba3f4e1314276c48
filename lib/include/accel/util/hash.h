// One hash for identities accel-bench writes (a resolved config's hash, a
// history's run keys): 64-bit FNV-1a, as 16 hex digits. Not cryptographic: it
// names, it does not authenticate.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace accel::util {

inline std::string fnv1a_hex(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;  // the FNV-1a 64-bit offset basis
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;  // the FNV 64-bit prime
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace accel::util
