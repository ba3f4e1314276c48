// safetensors reader and writer; see safetensors.h. The reader validates the
// whole header (lengths, dtypes, shapes, offsets, overlaps) against the file
// size before it allocates a single tensor, then reads each tensor's bytes
// straight into its storage.
#include "accel/models/safetensors.h"

#include <algorithm>
#include <set>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "accel/util/json.h"

#include "accel/util/json_doc.h"

#include "accel/util/errors.h"

namespace accel::models {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;  // as upstream safetensors
constexpr size_t kMaxRank = 64;

struct DType {
  const char* name;
  torch::ScalarType type;
  int64_t itemsize;
};

const DType kDTypes[] = {
    {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8}, {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

const DType* find_dtype(const std::string& name) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

struct Entry {
  std::string name;
  const DType* dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

class Reader {
 public:
  explicit Reader(const fs::path& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& what, const std::string& tensor = "") const {
    std::string msg = path_.string() + ": safetensors: " + what;
    if (!tensor.empty()) msg += " (tensor " + tensor + ")";
    throw ConfigError(msg);
  }

  SafetensorsFile read() {
    std::error_code ec;
    if (!fs::is_regular_file(path_, ec)) fail("no such file");
    const uint64_t file_size = fs::file_size(path_, ec);
    if (ec) fail("cannot stat the file: " + ec.message());
    in_.open(path_, std::ios::binary);
    if (!in_) fail("cannot open the file");
    if (file_size < 8) {
      fail("file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
    }
    unsigned char len_bytes[8];
    read_exact(0, reinterpret_cast<char*>(len_bytes), 8, "");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
    if (n > file_size - 8) {
      fail("header length " + std::to_string(n) + " runs past the end of the file (" +
           std::to_string(file_size) + " bytes)");
    }
    if (n > kMaxHeaderBytes) fail("header length " + std::to_string(n) + " exceeds 100 MB");
    std::string header(static_cast<size_t>(n), '\0');
    if (n > 0) read_exact(8, header.data(), n, "");
    const uint64_t data_start = 8 + n;
    const uint64_t buffer_size = file_size - data_start;

    SafetensorsFile out;
    std::vector<Entry> entries;
    try {
      // JSON itself keeps the last of two equal keys; the format forbids a
      // tensor named twice, so the parser is watched for it.
      std::set<std::string> names;
      std::string twice;
      const json::parser_callback_t watch = [&](int depth, json::parse_event_t event, json& key) {
        if (depth == 1 && event == json::parse_event_t::key && key.is_string() && twice.empty() &&
            !names.insert(key.get<std::string>()).second) {
          twice = key.get<std::string>();
        }
        return true;
      };
      if (json_nesting_depth(header) > kMaxJsonDepth) {
        fail("header nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
      const json doc = json::parse(header, watch);
      if (!twice.empty()) fail("the header names tensor \"" + twice + "\" twice");
      if (!doc.is_object()) fail("header is JSON but not an object");
      for (auto it = doc.begin(); it != doc.end(); ++it) {
        if (it.key() == "__metadata__") {
          parse_metadata(it.value(), out.metadata);
        } else {
          entries.push_back(parse_entry(it.key(), it.value(), buffer_size));
        }
      }
    } catch (const json::exception& e) {
      fail(std::string("header is not valid JSON: ") + e.what());
    }
    check_overlaps(entries);
    check_fully_indexed(entries, buffer_size);

    for (const auto& e : entries) {
      torch::Tensor t;
      try {
        t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype->type));
      } catch (const c10::Error&) {
        fail("cannot allocate shape " + shape_str(e.shape), e.name);
      }
      if (e.end > e.begin) {
        read_exact(data_start + e.begin, static_cast<char*>(t.data_ptr()), e.end - e.begin,
                   e.name);
      }
      out.tensors.emplace(e.name, std::move(t));
    }
    return out;
  }

 private:
  static std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

  void read_exact(uint64_t offset, char* dst, uint64_t count, const std::string& tensor) {
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(dst, static_cast<std::streamsize>(count));
    if (!in_ || static_cast<uint64_t>(in_.gcount()) != count) {
      fail("file ended early (truncated?) reading " + std::to_string(count) + " bytes at offset " +
               std::to_string(offset),
           tensor);
    }
  }

  void parse_metadata(const json& meta, std::map<std::string, std::string>& out) const {
    if (!meta.is_object()) fail("__metadata__ is not an object");
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      if (!it.value().is_string()) fail("__metadata__ value for \"" + it.key() + "\" is not a string");
      out[it.key()] = it.value().get<std::string>();
    }
  }

  Entry parse_entry(const std::string& name, const json& v, uint64_t buffer_size) const {
    if (!v.is_object()) fail("entry is not an object", name);
    Entry e{name, nullptr, {}, 0, 0};
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) fail("missing or non-string \"dtype\"", name);
    e.dtype = find_dtype(dt->get<std::string>());
    if (!e.dtype) {
      fail("unsupported dtype \"" + dt->get<std::string>() +
               "\" (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)",
           name);
    }
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) fail("missing or non-list \"shape\"", name);
    if (sh->size() > kMaxRank) fail("shape has " + std::to_string(sh->size()) + " dimensions", name);
    const uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) fail("shape entry " + d.dump() + " is not a non-negative integer", name);
      const uint64_t dim = d.get<uint64_t>();
      if (dim > kMax) fail("shape entry " + std::to_string(dim) + " is too large", name);
      e.shape.push_back(static_cast<int64_t>(dim));
      if (dim == 0) {
        numel = 0;
        overflow = false;
      } else if (numel != 0 && numel > kMax / dim) {
        overflow = true;
      } else if (numel != 0) {
        numel *= dim;
      }
    }
    if (overflow || (numel != 0 && numel > kMax / static_cast<uint64_t>(e.dtype->itemsize))) {
      fail("shape " + shape_str(e.shape) + " has too many elements", name);
    }
    const uint64_t bytes = numel * static_cast<uint64_t>(e.dtype->itemsize);
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 ||
        !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      fail("\"data_offsets\" is not a list of two non-negative integers", name);
    }
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    if (e.begin > e.end) {
      fail("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
               "] end before they begin",
           name);
    }
    if (e.end > buffer_size) {
      fail("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
               "] lie outside the " + std::to_string(buffer_size) +
               "-byte data buffer (truncated file?)",
           name);
    }
    if (e.end - e.begin != bytes) {
      fail("data_offsets span " + std::to_string(e.end - e.begin) + " bytes but " +
               std::string(e.dtype->name) + " shape " + shape_str(e.shape) + " needs " +
               std::to_string(bytes),
           name);
    }
    return e;
  }

  void check_overlaps(std::vector<Entry>& entries) const {
    std::vector<const Entry*> ranges;
    for (const auto& e : entries) {
      if (e.end > e.begin) ranges.push_back(&e);
    }
    std::sort(ranges.begin(), ranges.end(), [](const Entry* a, const Entry* b) {
      return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
    });
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (ranges[i]->begin < ranges[i - 1]->end) {
        fail("data overlaps that of tensor " + ranges[i - 1]->name, ranges[i]->name);
      }
    }
  }

  // The format's rule: the data buffer is exactly the tensors' bytes, back to
  // back, with no hole and nothing after them (no room for a second file).
  void check_fully_indexed(const std::vector<Entry>& entries, uint64_t buffer_size) const {
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const auto& e : entries) {
      if (e.end > e.begin) spans.emplace_back(e.begin, e.end);
    }
    std::sort(spans.begin(), spans.end());
    uint64_t at = 0;
    for (const auto& [begin, end] : spans) {
      if (begin != at) {
        fail("the data buffer has " + std::to_string(begin - at) + " bytes at offset " +
             std::to_string(at) + " that no tensor owns");
      }
      at = end;
    }
    if (at != buffer_size) {
      fail(std::to_string(buffer_size - at) + " bytes follow the last tensor's data (the format "
           "allows none)");
    }
  }

  fs::path path_;
  std::ifstream in_;
};

}  // namespace

std::string safetensors_dtype_name(torch::ScalarType type) {
  for (const auto& d : kDTypes) {
    if (d.type == type) return d.name;
  }
  throw ConfigError(std::string("safetensors: unsupported dtype ") + c10::toString(type));
}

SafetensorsFile read_safetensors_file(const fs::path& path) { return Reader(path).read(); }

NamedTensors read_safetensors(const fs::path& path) { return read_safetensors_file(path).tensors; }

void write_safetensors(const fs::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = path.string() + ": safetensors: ";
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") throw ConfigError(where + "a tensor may not be called __metadata__");
    if (!tensor.defined()) throw ConfigError(where + "undefined tensor (tensor " + name + ")");
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(tensor.scalar_type());
    } catch (const ConfigError& e) {
      throw ConfigError(path.string() + ": " + e.what() + " (tensor " + name + ")");
    }
    auto t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype}, {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw ConfigError(where + "cannot encode the header: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  // Temporary name in the same directory, then rename: readers never see a
  // half-written file.
  std::random_device rd;
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(rd());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw RunError(where + "cannot create " + tmp.string());
    char len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(len, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : data) {
      const auto bytes = static_cast<std::streamsize>(t.numel() * t.element_size());
      if (bytes > 0) out.write(static_cast<const char*>(t.data_ptr()), bytes);
    }
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw RunError(where + "write failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();  // before remove() reuses ec
    fs::remove(tmp, ec);
    throw RunError(where + "cannot rename " + tmp.string() + " into place: " + why);
  }
}

}  // namespace accel::models
