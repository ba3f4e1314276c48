// Private to lib/data: a sequential reader over a raw or gzip-compressed file
// that fails loudly (accel::DataError naming the file) on anything short of a
// complete, verified file.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

namespace accel::data::detail {

// Gzip is recognised by its magic bytes, not the file name. A gzip file is
// decompressed with inflate directly rather than zlib's gz* functions: gzread
// returns clean end-of-file for a stream whose 8-byte trailer (CRC32 and
// length) is missing, so a cut or altered download would load silently. Here
// the data counts as read only once inflate has checked that trailer.
class ByteReader {
 public:
  explicit ByteReader(const std::filesystem::path& file);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  // Appends up to n bytes to out; returns how many were appended (fewer only
  // at the verified end of the data). Reads in chunks, so a header that lies
  // about its size costs only the memory of the data that actually exists.
  int64_t read(std::vector<uint8_t>& out, int64_t n);

  // The header states the exact size: anything after it means the file is
  // not what we think it is (e.g. images and labels swapped, or concatenated).
  // For gzip this also reaches (and so verifies) the stream's trailer.
  void expect_end(int64_t expected);

 private:
  int64_t read_raw(uint8_t* dst, int64_t n);
  int64_t inflate_into(uint8_t* dst, int64_t n);
  bool refill();
  void next_member();
  [[noreturn]] void fail(const std::string& what) const;

  std::filesystem::path file_;
  std::FILE* fp_ = nullptr;
  bool gzip_ = false;
  bool done_ = false;  // gzip: every member ended with a verified trailer
  std::vector<uint8_t> in_;
  z_stream zs_{};
  bool zs_live_ = false;
};

}  // namespace accel::data::detail
