// The one include of nlohmann/json in accel-bench (a test keeps it so).
// nlohmann checks its own invariants with JSON_ASSERT, which is the C assert
// and compiled out in a release build: then a const operator[] of a key that
// is missing reads past the end of the object's map, undefined behaviour a
// doctored input file could reach. Here a failed check throws instead, in
// every build. Code reading a file does not lean on this: it uses the typed
// readers of accel/util/json_doc.h (num_at, str_at), value() or contains(),
// which name the field; this is the floor under a read that forgot to.
#pragma once

#ifdef INCLUDE_NLOHMANN_JSON_HPP_
#error "nlohmann/json.hpp was included before accel/util/json.h: include accel/util/json.h instead"
#endif

#include <stdexcept>
#include <string>

namespace accel::detail {
[[noreturn]] inline void json_check_failed(const char* check) {
  throw std::logic_error(std::string("a JSON document was read where it has no such field or element (") +
                         check + ")");
}
}  // namespace accel::detail

#define JSON_ASSERT(check) ((check) ? static_cast<void>(0) : ::accel::detail::json_check_failed(#check))

#include <nlohmann/json.hpp>
