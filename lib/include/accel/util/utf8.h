// UTF-8 to code points and back, strict: what every reader of text the
// project takes in (vocab files, corpora, GGUF strings) checks its bytes
// with. From utf8proc (Debian's libutf8proc); torch-free. The text layer
// names them accel::text::decode_utf8 etc. as well (accel/text/tokenizer.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace accel {

// Bytes that are not UTF-8 (the byte offset of the first bad sequence is in
// the message and in offset()). Callers that read files rethrow it as a
// DataError naming file and line.
class Utf8Error : public std::runtime_error {
 public:
  Utf8Error(const std::string& what, int64_t offset) : std::runtime_error(what), offset_(offset) {}
  int64_t offset() const { return offset_; }

 private:
  int64_t offset_;
};

// Code points of a UTF-8 string; Utf8Error on an invalid, overlong or
// surrogate sequence, or a code point above U+10FFFF.
std::u32string decode_utf8(std::string_view bytes);
std::string encode_utf8(std::u32string_view text);

}  // namespace accel
