// Reading JSON documents defensively: result.json, sweep.json, peaks.json,
// suites. A field that is missing or null reads as "n/a" (std::nullopt or the
// fallback), never 0, so files of older or newer schemas still load.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace accel {

using Json = nlohmann::json;
using OptNum = std::optional<double>;

// Parses a JSON file; accel::ConfigError naming the file when missing or not JSON.
Json read_json_file(const std::filesystem::path& file);

// A number at a JSON pointer-like path ("step_time_ms/median"); nullopt when
// missing, null or not a number.
OptNum num_at(const Json& doc, const std::string& path);
// A string at such a path; numbers and booleans as their JSON text; else fallback.
std::string str_at(const Json& doc, const std::string& path, const std::string& fallback = "");

}  // namespace accel
