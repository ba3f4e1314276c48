#include "byte_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "accel/util/errors.h"

namespace accel::data::detail {

namespace {
constexpr size_t kInput = size_t{1} << 18;  // fewer syscalls for the 47 MB Fashion-MNIST images
constexpr int64_t kChunk = int64_t{1} << 24;

// zlib's wording, with what it means for a downloaded file.
std::string explain(const char* msg) {
  std::string m = msg != nullptr ? msg : "invalid compressed data";
  if (m == "incorrect data check") return m + " (CRC32 mismatch: the data was altered)";
  if (m == "incorrect length check") return m + " (size mismatch in the trailer)";
  return m;
}
}  // namespace

ByteReader::ByteReader(const std::filesystem::path& file) : file_(file) {
  fp_ = std::fopen(file.c_str(), "rb");
  if (fp_ == nullptr) fail(std::string("cannot open for reading: ") + std::strerror(errno));
  try {
    if (!refill()) return;  // empty file: read() returns 0, callers report it
    gzip_ = in_.size() >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (!gzip_) return;
    // 16 + MAX_WBITS: a gzip wrapper only, trailer (CRC32, ISIZE) checked by inflate.
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) fail("cannot start zlib");
  } catch (...) {
    std::fclose(fp_);
    throw;
  }
  zs_live_ = true;
  zs_.next_in = in_.data();
  zs_.avail_in = static_cast<uInt>(in_.size());
}

ByteReader::~ByteReader() {
  if (zs_live_) inflateEnd(&zs_);
  if (fp_ != nullptr) std::fclose(fp_);
}

void ByteReader::fail(const std::string& what) const {
  throw DataError(file_.string() + ": " + what);
}

// Replaces the (consumed) input buffer with the next piece of the file;
// false at end of file.
bool ByteReader::refill() {
  in_.resize(kInput);
  const size_t got = std::fread(in_.data(), 1, in_.size(), fp_);
  in_.resize(got);
  if (got == 0 && std::ferror(fp_)) fail(std::string("read error: ") + std::strerror(errno));
  zs_.next_in = in_.data();
  zs_.avail_in = static_cast<uInt>(got);
  return got > 0;
}

int64_t ByteReader::read(std::vector<uint8_t>& out, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    const int64_t chunk = std::min(n - got, kChunk);
    const size_t old = out.size();
    out.resize(old + static_cast<size_t>(chunk));
    const int64_t r = gzip_ ? inflate_into(out.data() + old, chunk) : read_raw(out.data() + old, chunk);
    out.resize(old + static_cast<size_t>(r));
    got += r;
    if (r < chunk) break;  // end of the data
  }
  return got;
}

int64_t ByteReader::read_raw(uint8_t* dst, int64_t n) {
  int64_t got = 0;
  if (zs_.avail_in > 0) {  // bytes already buffered by the magic check
    const auto k = std::min<int64_t>(n, zs_.avail_in);
    std::memcpy(dst, zs_.next_in, static_cast<size_t>(k));
    zs_.next_in += k;
    zs_.avail_in -= static_cast<uInt>(k);
    got = k;
  }
  if (got < n && fp_ != nullptr) {
    got += static_cast<int64_t>(std::fread(dst + got, 1, static_cast<size_t>(n - got), fp_));
    if (got < n && std::ferror(fp_)) fail(std::string("read error: ") + std::strerror(errno));
  }
  return got;
}

int64_t ByteReader::inflate_into(uint8_t* dst, int64_t n) {
  zs_.next_out = dst;
  zs_.avail_out = static_cast<uInt>(n);
  while (zs_.avail_out > 0 && !done_) {
    if (zs_.avail_in == 0 && !refill())
      fail("truncated gzip stream: the file ends before the end of the compressed data "
           "and its CRC32/size trailer");
    const int ret = inflate(&zs_, Z_NO_FLUSH);
    if (ret == Z_STREAM_END) {
      next_member();
    } else if (ret == Z_DATA_ERROR) {
      fail("corrupt gzip data: " + explain(zs_.msg));
    } else if (ret == Z_MEM_ERROR) {
      fail("out of memory while decompressing");
    } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
      fail("zlib error " + std::to_string(ret) + " while decompressing");
    }
  }
  return n - static_cast<int64_t>(zs_.avail_out);
}

// A member ended and its trailer matched. gzip allows several members one
// after another (`cat a.gz b.gz`); anything else after the end is an error.
void ByteReader::next_member() {
  if (zs_.avail_in == 0 && !refill()) {
    done_ = true;
    return;
  }
  if (zs_.next_in[0] != 0x1f)
    fail("unexpected bytes after the end of the gzip stream");
  uint8_t* next_out = zs_.next_out;
  const uInt avail_out = zs_.avail_out;
  inflateReset(&zs_);  // keeps next_in/avail_in; the next header is checked by inflate
  zs_.next_out = next_out;
  zs_.avail_out = avail_out;
}

void ByteReader::expect_end(int64_t expected) {
  std::vector<uint8_t> extra;
  if (read(extra, 1) != 0)
    fail("unexpected data after the " + std::to_string(expected) + " bytes the header promises");
}

}  // namespace accel::data::detail
