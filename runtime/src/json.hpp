// Just enough JSON writing for stats and recorded launches.
#pragma once

#include <cstdint>
#include <string>

namespace attnpack {

inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (uint8_t(c) < 0x20) {
          static const char digits[] = "0123456789abcdef";
          out += "\\u00";
          out += digits[uint8_t(c) >> 4];
          out += digits[uint8_t(c) & 15];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

template <typename Container>
std::string json_numbers(const Container& values) {
  std::string out = "[";
  for (const auto& value : values) out += (out.size() > 1 ? "," : "") + std::to_string(value);
  return out + "]";
}

}  // namespace attnpack
