// Whole files (plain, gzip, bzip2) and CSV records for the text datasets.
#include "accel/data/text_files.h"

#include <bzlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "accel/util/errors.h"
#include "accel/util/input_file.h"
#include "byte_reader.h"

namespace accel::data::detail {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw DataError(file.string() + ": " + what);
}

std::string read_raw(const fs::path& file, int64_t max_bytes) {
  return read_input_file(file, "", max_bytes);
}

const char* bz2_error(int rc) {
  switch (rc) {
    case BZ_DATA_ERROR: return "corrupt bzip2 data (a block failed its CRC or does not decode)";
    case BZ_DATA_ERROR_MAGIC: return "not bzip2 data (bad stream header)";
    case BZ_MEM_ERROR: return "out of memory decompressing bzip2";
    case BZ_PARAM_ERROR: return "bzip2 parameter error";
    default: return "bzip2 error";
  }
}

// Every stream of a (possibly concatenated, as pbzip2 writes) bzip2 file,
// each decoded to its end-of-stream marker, whose combined CRC libbz2 checks.
std::string decompress_bz2(const fs::path& file, const std::string& packed, int64_t max_bytes) {
  std::string out;
  size_t pos = 0;
  char buf[1 << 16];
  while (pos < packed.size()) {
    bz_stream s{};
    if (BZ2_bzDecompressInit(&s, 0, 0) != BZ_OK) fail(file, "cannot start bzip2");
    s.next_in = const_cast<char*>(packed.data() + pos);
    s.avail_in = static_cast<unsigned>(std::min<size_t>(packed.size() - pos, 1u << 30));
    int rc = BZ_OK;
    while (rc == BZ_OK) {
      s.next_out = buf;
      s.avail_out = sizeof buf;
      rc = BZ2_bzDecompress(&s);
      out.append(buf, sizeof buf - s.avail_out);
      if (int64_t(out.size()) > max_bytes) {
        BZ2_bzDecompressEnd(&s);
        fail(file, "decompresses to more than " + std::to_string(max_bytes) + " bytes");
      }
      if (rc == BZ_OK && s.avail_in == 0 && s.avail_out != 0) {
        BZ2_bzDecompressEnd(&s);
        fail(file, "truncated: the bzip2 stream ends without its end-of-stream marker");
      }
    }
    const size_t used = size_t(s.next_in - (packed.data() + pos));
    BZ2_bzDecompressEnd(&s);
    if (rc != BZ_STREAM_END) fail(file, bz2_error(rc));
    pos += used;
    // A following stream must start with its own header; trailing zeros
    // (padding some tools add) end the file.
    if (pos < packed.size() && packed.compare(pos, 3, "BZh") != 0) {
      const bool zeros = packed.find_first_not_of('\0', pos) == std::string::npos;
      if (zeros) break;
      fail(file, "unexpected bytes after the bzip2 stream at offset " + std::to_string(pos));
    }
  }
  return out;
}

}  // namespace

std::string read_file_bytes(const fs::path& file, int64_t max_bytes) {
  std::string raw = read_raw(file, max_bytes);
  if (raw.size() >= 3 && raw.compare(0, 3, "BZh") == 0) return decompress_bz2(file, raw, max_bytes);
  if (raw.size() >= 2 && uint8_t(raw[0]) == 0x1f && uint8_t(raw[1]) == 0x8b) {
    ByteReader reader(file);  // verifies the gzip trailer
    std::vector<uint8_t> bytes;
    reader.read(bytes, max_bytes + 1);
    if (int64_t(bytes.size()) > max_bytes) fail(file, "decompresses to more than " + std::to_string(max_bytes) + " bytes");
    return std::string(bytes.begin(), bytes.end());
  }
  return raw;
}

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& source) {
  std::vector<CsvRecord> records;
  int64_t line = 1;
  size_t i = 0;
  const size_t n = text.size();
  auto error = [&](int64_t at, const std::string& what) {
    throw DataError(source + ":" + std::to_string(at) + ": " + what);
  };
  while (i < n) {
    CsvRecord rec;
    rec.line = line;
    std::string field;
    bool end_of_record = false;
    while (!end_of_record) {
      field.clear();
      if (i < n && text[i] == '"') {
        const int64_t opened = line;
        ++i;
        for (;;) {
          if (i >= n) error(opened, "unterminated quoted field (a '\"' opened here is never closed)");
          const char c = text[i];
          if (c == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (c == '\n') ++line;
          field += c;
          ++i;
        }
        if (i < n && text[i] != ',' && text[i] != '\n' && !(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n') &&
            text[i] != '\r') {
          error(line, "unexpected character '" + std::string(1, text[i]) +
                          "' after a closing quote (a field is either quoted whole or not at all)");
        }
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n' && text[i] != '\r') field += text[i++];
      }
      rec.fields.push_back(field);
      if (i >= n) {
        end_of_record = true;
      } else if (text[i] == ',') {
        ++i;
      } else {  // \n, \r\n or a lone \r
        if (text[i] == '\r') ++i;
        if (i < n && text[i] == '\n') ++i;
        ++line;
        end_of_record = true;
      }
    }
    const bool blank = rec.fields.size() == 1 && rec.fields[0].empty();
    if (!blank) records.push_back(std::move(rec));
  }
  return records;
}

}  // namespace accel::data::detail
