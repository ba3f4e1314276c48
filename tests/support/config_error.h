// Checking the one-line messages of ConfigError.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include "accel/util/errors.h"

namespace accel_test {

// The what() of the ConfigError `f` throws, or a marker that fails checks.
inline std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const accel::ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a ConfigError: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline bool has(const std::string& msg, const std::string& part) {
  return msg.find(part) != std::string::npos;
}

}  // namespace accel_test
