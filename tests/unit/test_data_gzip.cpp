// Gzip dataset files end with a verified CRC32 and length: a cut or altered
// download is a DataError naming the file, never silently different pixels.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include "support/temp_dir.h"
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/data/dataset.h"
#include "accel/util/errors.h"

namespace {

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::data;
using Bytes = std::vector<uint8_t>;

void put_be32(Bytes& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

// IDX images with varied pixels (so compression keeps real Huffman codes).
Bytes idx_images(uint32_t n, uint32_t side) {
  Bytes b;
  for (uint32_t v : {0x803U, n, side, side}) put_be32(b, v);
  uint32_t s = 12345;
  for (uint32_t i = 0; i < n * side * side; ++i) {
    s = s * 1103515245U + 12345U;
    b.push_back(static_cast<uint8_t>((s >> 16) % 7 * 30));
  }
  return b;
}

Bytes idx_labels(uint32_t n) {
  Bytes b;
  for (uint32_t v : {0x801U, n}) put_be32(b, v);
  for (uint32_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i % 10));
  return b;
}

// A gzip file as gzip(1) writes it: header, deflate data, CRC32, ISIZE.
Bytes gzip(const Bytes& data) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&zs, static_cast<uLong>(data.size())) + 32);
  zs.next_in = const_cast<Bytef*>(data.data());
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

void write(const fs::path& p, const Bytes& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The DataError message of reading images `img` (labels fixed), "" if it loads.
std::string read_error(const fs::path& img, const fs::path& lab) {
  try {
    read_idx(img, lab, 10);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

struct Files {
  accel_test::TempDir dir;
  Bytes images = idx_images(6, 8);
  Bytes gz = gzip(images);
  fs::path lab = dir / "labels";
  Files() { write(lab, idx_labels(6)); }
  fs::path put(const std::string& name, const Bytes& bytes) {
    write(dir / name, bytes);
    return dir / name;
  }
};

}  // namespace

TEST_CASE("data gzip: an intact gzip file loads like the raw one") {
  Files f;
  const auto a = read_idx(f.put("raw", f.images), f.lab, 10);
  const auto b = read_idx(f.put("img.gz", f.gz), f.lab, 10);
  CHECK(torch::equal(image_pixels(a), image_pixels(b)));
  // Two gzip members one after another are one stream (as gunzip reads them).
  const Bytes head(f.images.begin(), f.images.begin() + 100), tail(f.images.begin() + 100, f.images.end());
  Bytes two = gzip(head);
  const Bytes second = gzip(tail);
  two.insert(two.end(), second.begin(), second.end());
  CHECK(torch::equal(image_pixels(read_idx(f.put("two.gz", two), f.lab, 10)), image_pixels(a)));
}

TEST_CASE("data gzip: a file with its trailer cut is a DataError naming it") {
  Files f;
  for (size_t cut : {8, 4, 1}) {  // head -c -8: CRC32 and ISIZE gone; and partly
    const Bytes shorter(f.gz.begin(), f.gz.end() - static_cast<long>(cut));
    const auto p = f.put("cut" + std::to_string(cut) + ".gz", shorter);
    const std::string msg = read_error(p, f.lab);
    CHECK_MESSAGE(msg.find(p.string() + ": truncated gzip stream") == 0, cut, ": ", msg);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("data gzip: a flipped bit fails the CRC even when the trailer is cut too") {
  Files f;
  Bytes bad = f.gz;
  bad[bad.size() - 6] ^= 0x01;  // inside the stored CRC32
  auto msg = read_error(f.put("crc.gz", bad), f.lab);
  CHECK_MESSAGE(msg.find("crc.gz: corrupt gzip data: incorrect data check (CRC32 mismatch") !=
                    std::string::npos, msg);
  bad = f.gz;
  bad[bad.size() - 3] ^= 0x01;  // inside ISIZE
  msg = read_error(f.put("isize.gz", bad), f.lab);
  CHECK_MESSAGE(msg.find("isize.gz: corrupt gzip data: incorrect length check") != std::string::npos,
                msg);
  // The case: a flipped data bit plus a cut trailer.
  bad = Bytes(f.gz.begin(), f.gz.end() - 8);
  bad[bad.size() / 2] ^= 0x10;
  CHECK_FALSE(read_error(f.put("both.gz", bad), f.lab).empty());
  // Bytes after the end of the stream.
  bad = f.gz;
  bad.push_back(0);
  msg = read_error(f.put("junk.gz", bad), f.lab);
  CHECK_MESSAGE(msg.find("junk.gz: unexpected bytes after the end of the gzip stream") !=
                    std::string::npos, msg);
}

TEST_CASE("data gzip: no single flipped bit anywhere loads altered pixels") {
  Files f;
  const auto good = image_pixels(read_idx(f.put("good.gz", f.gz), f.lab, 10));
  int rejected = 0, same = 0;
  const auto p = f.dir / "flip.gz";
  for (size_t byte = 0; byte < f.gz.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes bad = f.gz;
      bad[byte] ^= static_cast<uint8_t>(1U << bit);
      write(p, bad);
      try {
        const auto got = image_pixels(read_idx(p, f.lab, 10));
        // Only bits that carry no data (gzip header mtime/flags/OS, padding) may load.
        CHECK_MESSAGE(torch::equal(got, good), "byte ", byte, " bit ", bit, " loaded altered data");
        ++same;
      } catch (const DataError& e) {
        CHECK(std::string(e.what()).find(p.string() + ": ") == 0);
        ++rejected;
      }
    }
  }
  MESSAGE("bit flips: " << rejected << " rejected, " << same << " harmless");
  CHECK(rejected > same);
}

TEST_CASE("data gzip: the installed Fashion-MNIST files still verify and load") {
  const fs::path root = "/usr/share/datasets/fashion-mnist";
  REQUIRE_MESSAGE(fs::exists(root / "t10k-images-idx3-ubyte.gz"),
                  "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto test = read_idx(root / "t10k-images-idx3-ubyte.gz", root / "t10k-labels-idx1-ubyte.gz", 10);
  CHECK(test.size() == 10000);
  CHECK(image_pixels(test).sizes() == torch::IntArrayRef({10000, 1, 28, 28}));
}
