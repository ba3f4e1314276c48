// The GGUF header reader (accel/util/gguf_header.h): every field read
// against the file's size before anything is allocated. Torch-free.
#include "accel/util/gguf_header.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "accel/util/errors.h"
#include "accel/util/utf8.h"

namespace accel {

// Named, not anonymous: the torch-free sources are one unity batch.
namespace gguf_detail {

namespace fs = std::filesystem;
using json = nlohmann::json;

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader reads little-endian files on little-endian hosts"
#endif

constexpr uint32_t kMaxDims = 4;                      // ggml's GGML_MAX_DIMS
constexpr uint64_t kMaxValueBytes = 64ull << 20;      // one string value (a chat template, a licence)
constexpr uint64_t kMaxNameBytes = 64ull << 10;       // one key or tensor name
constexpr uint64_t kMaxArrayItems = 16ull << 20;      // a vocabulary is ~50k-260k
constexpr uint32_t kDefaultAlignment = 32;

const GgufTypeInfo kTypes[] = {
    {0, "F32", 1, 4}, {1, "F16", 1, 2}, {2, "Q4_0", 32, 18}, {3, "Q4_1", 32, 20}, {8, "Q8_0", 32, 34},
    {30, "BF16", 1, 2},
};

const GgufTypeInfo* find_type(uint32_t id) {
  for (const auto& t : kTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::string types_read() {
  std::string s;
  for (const auto& t : kTypes) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

[[noreturn]] void fail(const fs::path& path, const std::string& what, const std::string& tensor = "") {
  gguf_error(path, what, tensor);
}

// What a read is of, for an error message: `what` and its `subject` ("the
// type of metadata" "general.name"), made into text only when a read fails (an
// array of a vocabulary reads 50k strings of one key).
struct Of {
  const char* what;
  const std::string& subject;
  std::string text() const { return subject.empty() ? std::string(what) : std::string(what) + " " + subject; }
};

// Sequential reads from the header, each checked against the file's size.
class Cursor {
 public:
  Cursor(const fs::path& path, uint64_t size) : path_(path), size_(size), in_(path, std::ios::binary) {
    if (!in_) fail(path_, "cannot open the file");
  }
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  void need(uint64_t n, const Of& of) {
    if (n > left()) {
      fail(path_, of.text() + " runs past the end of the file (" + std::to_string(size_) + " bytes; at offset " +
                      std::to_string(pos_) + ", " + std::to_string(n) + " bytes needed)");
    }
  }
  void bytes(void* dst, uint64_t n, const Of& of) {
    need(n, of);
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in_ || static_cast<uint64_t>(in_.gcount()) != n) fail(path_, "cannot read " + of.text());
    pos_ += n;
  }
  template <class T>
  T scalar(const Of& of) {
    T v;
    bytes(&v, sizeof v, of);
    return v;
  }
  // A string (a key, a name or a value) of at most `cap` bytes, UTF-8.
  std::string str(const Of& of, uint64_t cap) {
    const auto n = scalar<uint64_t>(of);
    if (n > cap) {
      fail(path_, of.text() + " is " + std::to_string(n) + " bytes long (at most " + std::to_string(cap) + ")");
    }
    need(n, of);
    std::string s(static_cast<size_t>(n), '\0');
    if (n > 0) bytes(s.data(), n, of);
    try {
      (void)decode_utf8(s);  // GGUF's strings are UTF-8: one that is not would make the metadata unprintable
    } catch (const Utf8Error&) {
      fail(path_, of.text() + " is not UTF-8");
    }
    return s;
  }

 private:
  fs::path path_;
  uint64_t size_;
  std::ifstream in_;
  uint64_t pos_ = 0;
};

// A metadata value's smallest encoding, for the bound on an array's count;
// 0 for a type no GGUF value has.
uint64_t min_value_bytes(uint32_t type) {
  switch (type) {
    case 0: case 1: case 7: return 1;
    case 2: case 3: return 2;
    case 4: case 5: case 6: return 4;
    case 8: case 10: case 11: case 12: return 8;
    case 9: return 12;
    default: return 0;
  }
}

// One metadata value of `key`; an array's items are scalars or strings (as
// ggml reads them: no array of arrays).
json value(Cursor& c, const fs::path& path, uint32_t type, bool in_array, const std::string& key) {
  const Of of{"metadata", key};
  switch (type) {
    case 0: return c.scalar<uint8_t>(of);
    case 1: return c.scalar<int8_t>(of);
    case 2: return c.scalar<uint16_t>(of);
    case 3: return c.scalar<int16_t>(of);
    case 4: return c.scalar<uint32_t>(of);
    case 5: return c.scalar<int32_t>(of);
    case 6: return c.scalar<float>(of);
    case 7: {
      const auto b = c.scalar<uint8_t>(of);
      if (b > 1) fail(path, "metadata " + key + ": a bool of " + std::to_string(b));
      return b == 1;
    }
    case 8: return c.str(of, kMaxValueBytes);
    case 9: {
      if (in_array) fail(path, "metadata " + key + ": an array of arrays");
      const auto elem = c.scalar<uint32_t>(of);
      const auto n = c.scalar<uint64_t>(of);
      if (elem == 9 || min_value_bytes(elem) == 0) {
        fail(path, "metadata " + key + ": arrays of value type " + std::to_string(elem) + " (scalars and strings are read)");
      }
      if (n > kMaxArrayItems) fail(path, "metadata " + key + ": " + std::to_string(n) + " items (at most 16M)");
      c.need(n * min_value_bytes(elem), of);
      json arr = json::array();
      for (uint64_t i = 0; i < n; ++i) arr.push_back(value(c, path, elem, true, key));
      return arr;
    }
    case 10: return c.scalar<uint64_t>(of);
    case 11: return c.scalar<int64_t>(of);
    case 12: return c.scalar<double>(of);
    default: fail(path, "metadata " + key + ": value type " + std::to_string(type) + " is not a GGUF type");
  }
}

}  // namespace gguf_detail

void gguf_error(const std::filesystem::path& path, const std::string& what, const std::string& tensor) {
  std::string msg = path.string() + ": gguf: " + what;
  if (!tensor.empty()) msg += " (tensor " + tensor + ")";
  throw ConfigError(msg);
}

const GgufTypeInfo* gguf_type_info(uint32_t type) { return gguf_detail::find_type(type); }

int64_t GgufTensorInfo::numel() const {
  // As read_gguf_header checked them: at most 2^40 values.
  int64_t n = 1;
  for (const auto d : dims) n = d > 0 && n <= (int64_t(1) << 40) / d ? n * d : 0;
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const { return {dims.rbegin(), dims.rend()}; }

const GgufTensorInfo* GgufFile::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string gguf_type_name(uint32_t type) {
  const auto* t = gguf_detail::find_type(type);
  return t != nullptr ? t->name : "type " + std::to_string(type);
}

namespace gguf_detail {

GgufFile read_header(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail(path, "no such file");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot stat the file: " + ec.message());
  Cursor c(path, size);
  GgufFile out;
  out.path = path;
  const std::string none;
  char magic[4];
  c.bytes(magic, 4, Of{"the magic", none});
  if (std::memcmp(magic, "GGUF", 4) != 0) fail(path, "not a GGUF file (its first bytes are not \"GGUF\")");
  out.version = c.scalar<uint32_t>(Of{"the version", none});
  if ((out.version & 0xFFFFu) == 0 && out.version != 0) {
    fail(path, "version " + std::to_string(out.version) + ": a file of the other byte order (read here: little-endian)");
  }
  if (out.version != 2 && out.version != 3) {
    fail(path, "version " + std::to_string(out.version) + " (read here: 2 and 3)");
  }
  const auto n_tensors = c.scalar<uint64_t>(Of{"the tensor count", none});
  const auto n_kv = c.scalar<uint64_t>(Of{"the metadata count", none});
  // Each key-value takes at least 13 bytes and each tensor info 32.
  if (n_kv > c.left() / 13) fail(path, std::to_string(n_kv) + " metadata entries cannot fit in the file");
  if (n_tensors > c.left() / 32) fail(path, std::to_string(n_tensors) + " tensors cannot fit in the file");
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = c.str(Of{"a metadata key", none}, kMaxNameBytes);
    const auto type = c.scalar<uint32_t>(Of{"the type of metadata", key});
    json v = value(c, path, type, false, key);
    if (!out.metadata.emplace(key, std::move(v)).second) fail(path, "metadata key " + key + " given twice");
  }
  uint64_t alignment = kDefaultAlignment;
  if (const auto it = out.metadata.find("general.alignment"); it != out.metadata.end()) {
    // ggml writes it as a uint32; any integer type is read.
    const auto& a = it->second;
    const bool integer = a.is_number_unsigned() || (a.is_number_integer() && a.get<int64_t>() > 0);
    const uint64_t v = integer ? a.get<uint64_t>() : 0;
    if (v == 0 || (v & (v - 1)) != 0 || v > (1u << 20)) {
      fail(path, "general.alignment must be a power of two up to 1 MiB (" +
                     (integer ? "it is " + std::to_string(v) : "it is not a positive integer") + ")");
    }
    alignment = v;
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.str(Of{"a tensor's name", none}, kMaxNameBytes);
    if (!names.insert(t.name).second) fail(path, "a second tensor of this name", t.name);
    const auto n_dims = c.scalar<uint32_t>(Of{"the dimension count of tensor", t.name});
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail(path, std::to_string(n_dims) + " dimensions (1 to " + std::to_string(kMaxDims) + ")", t.name);
    }
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = c.scalar<uint64_t>(Of{"the dimensions of tensor", t.name});
      if (dim == 0 || dim > kGgufMaxElements || numel > kGgufMaxElements / dim) {
        fail(path, "dimension " + std::to_string(dim) + " makes more than 2^40 values or none", t.name);
      }
      numel *= dim;
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    t.type = c.scalar<uint32_t>(Of{"the type of tensor", t.name});
    const auto* info = find_type(t.type);
    if (info == nullptr) fail(path, gguf_type_name(t.type) + " is not read here (" + types_read() + ")", t.name);
    if (t.dims[0] % info->block != 0) {
      fail(path, "its first dimension, " + std::to_string(t.dims[0]) + ", is not whole blocks of " +
                     std::to_string(info->block) + " (" + info->name + ")",
           t.name);
    }
    t.bytes = numel / static_cast<uint64_t>(info->block) * static_cast<uint64_t>(info->block_bytes);
    t.offset = c.scalar<uint64_t>(Of{"the offset of tensor", t.name});
    if (t.offset % alignment != 0) {
      fail(path, "offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                     std::to_string(alignment), t.name);
    }
    out.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment (a file
  // of metadata alone, a vocabulary's, need not be padded to it).
  const uint64_t pad = (alignment - c.pos() % alignment) % alignment;
  out.data_offset = c.pos() + pad;
  if (out.tensors.empty()) return out;
  if (out.data_offset > size) fail(path, "the data section starts past the end of the file");
  const uint64_t data_bytes = size - out.data_offset;
  std::vector<std::pair<uint64_t, const GgufTensorInfo*>> extents;
  for (const auto& t : out.tensors) {
    if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
      fail(path, "its " + std::to_string(t.bytes) + " bytes at offset " + std::to_string(t.offset) +
                     " run past the end of the data section (" + std::to_string(data_bytes) + " bytes)",
           t.name);
    }
    extents.emplace_back(t.offset, &t);
  }
  std::sort(extents.begin(), extents.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < extents.size(); ++i) {
    const auto* prev = extents[i - 1].second;
    if (prev->offset + prev->bytes > extents[i].first) {
      fail(path, "its data overlaps tensor " + prev->name + "'s", extents[i].second->name);
    }
  }
  return out;
}

}  // namespace gguf_detail

GgufFile read_gguf_header(const std::filesystem::path& path) {
  try {
    return gguf_detail::read_header(path);
  } catch (const std::bad_alloc&) {
    gguf_detail::fail(path, "its metadata does not fit in memory");
  }
}

}  // namespace accel
