#include "accel/util/utf8.h"

#include <utf8proc.h>

#include <cstdio>

namespace accel {

std::u32string decode_utf8(std::string_view bytes) {
  std::u32string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(bytes.data());
  utf8proc_ssize_t i = 0;
  const auto n = utf8proc_ssize_t(bytes.size());
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII, the common case, without a call
      out.push_back(char32_t(p[i++]));
      continue;
    }
    utf8proc_int32_t cp = -1;
    const auto len = utf8proc_iterate(p + i, n - i, &cp);
    if (len < 0 || cp < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", unsigned(p[i]));
      throw Utf8Error("invalid UTF-8 at byte " + std::to_string(i) + " (" + hex + ")", int64_t(i));
    }
    out.push_back(char32_t(cp));
    i += len;
  }
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  utf8proc_uint8_t buf[4];
  for (char32_t c : text) {
    if (c < 0x80) {
      out.push_back(char(c));
      continue;
    }
    const auto len = utf8proc_encode_char(utf8proc_int32_t(c), buf);
    out.append(reinterpret_cast<const char*>(buf), size_t(len));
  }
  return out;
}

}  // namespace accel
