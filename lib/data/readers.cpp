// Readers for the on-disk image datasets (IDX for the MNIST family, the
// CIFAR-10 binary version) and the synthetic generator. Everything here
// produces uint8 image sets; conversion to float happens per batch in the
// collator so a whole dataset never exists as float. Where each dataset's
// files are is the dataset table's (datasets.cpp).
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "accel/data/dataset.h"
#include "accel/util/errors.h"
#include "byte_reader.h"

namespace accel::data {
namespace fs = std::filesystem;
using detail::ByteReader;

namespace {

[[noreturn]] void data_error(const fs::path& file, const std::string& what) {
  throw DataError(file.string() + ": " + what);
}

// A file that is not there is a configuration problem (wrong data.root), not
// a data problem: the CLI reports it with exit code 2 before any work.
void require_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) throw ConfigError("data.root: missing file " + file.string());
  if (!fs::is_regular_file(file, ec)) data_error(file, "not a regular file");
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Reads an IDX header of ndims dimensions and checks the magic
// (0x00 0x00 type=0x08 (unsigned byte) ndims).
std::vector<int64_t> read_idx_header(ByteReader& r, const fs::path& file, int ndims,
                                     const char* kind) {
  const uint32_t magic = 0x00000800U | static_cast<uint32_t>(ndims);
  const int64_t size = 4 + 4 * int64_t{ndims};
  std::vector<uint8_t> hdr;
  const int64_t got = r.read(hdr, size);
  if (got < 4)
    data_error(file, "truncated: expected " + std::to_string(size) + " bytes of header, got " +
                         std::to_string(got));
  if (be32(hdr.data()) != magic)
    data_error(file, "bad magic " + hex32(be32(hdr.data())) + ", expected " + hex32(magic) +
                         " (IDX unsigned-byte " + kind + ")");
  if (got < size)
    data_error(file, "truncated: expected " + std::to_string(size) + " bytes of header, got " +
                         std::to_string(got));
  std::vector<int64_t> dims;
  for (int d = 0; d < ndims; ++d) dims.push_back(be32(hdr.data() + 4 + 4 * d));
  return dims;
}

void read_payload(ByteReader& r, const fs::path& file, std::vector<uint8_t>& out,
                  int64_t expected, const char* what) {
  const int64_t got = r.read(out, expected);
  if (got < expected)
    data_error(file, "truncated: expected " + std::to_string(expected) + " bytes of " + what +
                         " data, got " + std::to_string(got));
  r.expect_end(expected);
}

torch::Tensor to_tensor(std::vector<uint8_t>& bytes, std::vector<int64_t> shape) {
  if (bytes.empty()) return torch::empty(shape, torch::kUInt8);  // no storage to wrap
  return torch::from_blob(bytes.data(), shape, torch::kUInt8).clone();
}

}  // namespace

ExampleSet read_idx(const fs::path& images_file, const fs::path& labels_file, int num_classes) {
  require_file(images_file);
  require_file(labels_file);
  if (num_classes <= 0) throw std::invalid_argument("read_idx: num_classes must be positive");

  ByteReader ri(images_file);
  const auto idims = read_idx_header(ri, images_file, 3, "images");
  const int64_t n = idims[0], h = idims[1], w = idims[2];
  if (h <= 0 || w <= 0 || h > 65536 || w > 65536)
    data_error(images_file, "implausible image size " + std::to_string(h) + "x" + std::to_string(w));
  if (n > (int64_t{1} << 40) / (h * w))  // no signed overflow below; 1 TB is not an image set
    data_error(images_file, "implausible image count " + std::to_string(n) + " of " +
                                std::to_string(h) + "x" + std::to_string(w));
  std::vector<uint8_t> pixels;
  read_payload(ri, images_file, pixels, n * h * w, "pixel");

  ByteReader rl(labels_file);
  const int64_t nl = read_idx_header(rl, labels_file, 1, "labels")[0];
  if (nl != n)
    throw DataError(images_file.string() + " holds " + std::to_string(n) + " images but " +
                    labels_file.string() + " holds " + std::to_string(nl) + " labels");
  std::vector<uint8_t> labels;
  read_payload(rl, labels_file, labels, n, "label");
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] >= num_classes)
      data_error(labels_file, "label " + std::to_string(labels[i]) + " at index " +
                                  std::to_string(i) + " is out of range (" +
                                  std::to_string(num_classes) + " classes)");

  auto images = to_tensor(pixels, {n, 1, h, w});
  // Statistics of the file itself: a generic MNIST-family default (the
  // dataset table uses published values where there are some).
  auto [mean, stdev] = pixel_stats(images);
  return make_image_set(images, to_tensor(labels, {n}).to(torch::kLong), num_classes, mean, stdev);
}

ExampleSet read_cifar10(const std::vector<fs::path>& files) {
  constexpr int64_t kPixels = 3 * 32 * 32, kRecord = 1 + kPixels;
  std::vector<torch::Tensor> images, labels;
  for (const auto& file : files) {
    require_file(file);
    std::error_code ec;
    const auto size = static_cast<int64_t>(fs::file_size(file, ec));
    if (ec) data_error(file, "cannot stat: " + ec.message());
    if (size == 0 || size % kRecord != 0)
      data_error(file, "size " + std::to_string(size) + " is not a positive multiple of " +
                           std::to_string(kRecord) + " (1 label byte + 3072 pixel bytes per record)");
    std::ifstream in(file, std::ios::binary);
    if (!in) data_error(file, std::string("cannot open for reading: ") + std::strerror(errno));
    std::vector<uint8_t> buf(static_cast<size_t>(size));
    in.read(reinterpret_cast<char*>(buf.data()), size);
    if (in.gcount() != size)  // file shrank between stat and read
      data_error(file, "truncated: expected " + std::to_string(size) + " bytes, got " +
                           std::to_string(in.gcount()));
    const int64_t n = size / kRecord;
    auto img = torch::empty({n, 3, 32, 32}, torch::kUInt8);
    auto lab = torch::empty({n}, torch::kLong);
    uint8_t* ip = img.data_ptr<uint8_t>();
    int64_t* lp = lab.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* rec = buf.data() + i * kRecord;
      if (rec[0] >= 10)
        data_error(file, "label " + std::to_string(rec[0]) + " in record " + std::to_string(i) +
                             " is out of range (10 classes)");
      lp[i] = rec[0];
      // The record is already channel-major (1024 R, 1024 G, 1024 B, each
      // row-major), i.e. exactly CHW.
      std::memcpy(ip + i * kPixels, rec + 1, kPixels);
    }
    images.push_back(img);
    labels.push_back(lab);
  }
  return make_image_set(
      images.empty() ? torch::empty({0, 3, 32, 32}, torch::kUInt8) : torch::cat(images),
      labels.empty() ? torch::empty({0}, torch::kLong) : torch::cat(labels), 10,
      {0.4914F, 0.4822F, 0.4465F}, {0.2470F, 0.2435F, 0.2616F});
}

namespace {
// splitmix64: tiny, portable, statistically solid; the synthetic data must be
// bit-identical on every compiler and LibTorch version.
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace

// Each class has a fixed prototype: a 4x4 grid of cells per channel with
// brightness in [40, 215]. The prototypes depend only on the class (not on
// seed), so train and test sets made with different seeds share them and the
// task is learnable; seed only drives the per-sample noise (+-40 per pixel)
// and a per-sample brightness shift (+-20). Labels cycle 0..k-1 so every
// class is equally represented in any contiguous range, including the
// validation tail.
ExampleSet make_synthetic(int64_t n, int channels, int size, int num_classes, uint64_t seed) {
  if (n < 0 || channels <= 0 || size <= 0 || num_classes <= 0)
    throw std::invalid_argument("make_synthetic: n >= 0, channels, size and classes > 0 required");
  constexpr int kGrid = 4;
  std::vector<uint8_t> proto(static_cast<size_t>(num_classes) * channels * kGrid * kGrid);
  for (int c = 0; c < num_classes; ++c) {
    uint64_t s = 0xC1A55E5ULL + static_cast<uint64_t>(c) * 0x100000001B3ULL;
    for (int k = 0; k < channels * kGrid * kGrid; ++k)
      proto[static_cast<size_t>(c * channels * kGrid * kGrid + k)] =
          static_cast<uint8_t>(40 + splitmix64(s) % 176);
  }
  auto images = torch::empty({n, channels, size, size}, torch::kUInt8);
  auto labels = torch::empty({n}, torch::kLong);
  uint8_t* ip = images.data_ptr<uint8_t>();
  int64_t* lp = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(i % num_classes);
    lp[i] = c;
    uint64_t s = seed ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ULL);
    const int shift = static_cast<int>(splitmix64(s) % 41) - 20;
    uint64_t bits = 0;
    int left = 0;
    for (int ch = 0; ch < channels; ++ch)
      for (int y = 0; y < size; ++y)
        for (int x = 0; x < size; ++x) {
          if (left == 0) bits = splitmix64(s), left = 8;
          const int noise = static_cast<int>(((bits & 0xFF) * 81) >> 8) - 40;
          bits >>= 8, --left;
          const int cell = (y * kGrid / size) * kGrid + (x * kGrid / size);
          const int v = proto[static_cast<size_t>((c * channels + ch) * kGrid * kGrid + cell)] +
                        shift + noise;
          *ip++ = static_cast<uint8_t>(std::clamp(v, 0, 255));
        }
  }
  auto [mean, stdev] = pixel_stats(images);
  return make_image_set(images, labels, num_classes, mean, stdev);
}

}  // namespace accel::data
