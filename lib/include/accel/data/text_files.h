// Reading the files text datasets come in. A whole file
// as bytes (plain, gzip or bzip2, told by the magic bytes and verified to the
// end of every stream) and an RFC 4180 CSV parser that keeps the line each
// record starts on, so every error names file and line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace accel::data::detail {

// The decompressed content of FILE. bzip2 ("BZh") through libbz2, every
// stream to its end-of-stream marker and CRC (a cut or altered file is a
// DataError naming it, never a short read); gzip through ByteReader; anything
// else as is. Refuses more than max_bytes of content (a runaway file).
std::string read_file_bytes(const std::filesystem::path& file,
                            int64_t max_bytes = int64_t{1} << 32);

struct CsvRecord {
  std::vector<std::string> fields;
  int64_t line = 0;  // 1-based line of the file where the record starts
};

// Records of an RFC 4180 document: fields separated by ',', records by LF or
// CRLF, a field in double quotes may hold commas, quotes (doubled) and line
// breaks. An unterminated quote, or text after a closing quote, is a
// DataError "SOURCE:LINE: ...". Empty lines are skipped.
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& source);

}  // namespace accel::data::detail
