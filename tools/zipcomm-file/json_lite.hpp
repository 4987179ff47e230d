// zipcomm-file: a small, strict JSON reader for the subset safetensors headers use (objects, arrays,
// strings with escapes, non-negative integers; true/false/null and other numbers are accepted and kept as
// text). Errors throw JsonError with the byte offset; nesting depth is bounded so hostile input cannot
// overflow the stack.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace zipcomm_file {

struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct JsonValue {
  enum class Kind { null_, boolean, number, string, array, object } kind = Kind::null_;
  bool b = false;
  bool is_uint = false;  // number that is a non-negative integer fitting in uint64
  uint64_t u = 0;
  std::string s;  // string contents, or the number's text
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;  // object members in file order

  const JsonValue* find(const std::string& key) const {
    for (const auto& m : members)
      if (m.first == key) return &m.second;
    return nullptr;
  }
};

class JsonParser {
 public:
  JsonParser(const char* p, size_t n) : p_(p), n_(n) {}

  JsonValue parse_document() {
    skip_ws();
    JsonValue v = parse_value(0);
    skip_ws();
    if (i_ != n_) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  static constexpr int MAX_DEPTH = 64;
  const char* p_;
  size_t n_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw JsonError("bad JSON at byte " + std::to_string(i_) + ": " + what);
  }
  void skip_ws() {
    while (i_ < n_ && (p_[i_] == ' ' || p_[i_] == '\t' || p_[i_] == '\n' || p_[i_] == '\r')) ++i_;
  }
  char peek() const { return i_ < n_ ? p_[i_] : '\0'; }
  void expect(char c) {
    if (i_ >= n_) fail(std::string("unexpected end of input, expected '") + c + "'");
    if (p_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void literal(const char* word) {
    for (const char* w = word; *w; ++w, ++i_)
      if (i_ >= n_ || p_[i_] != *w) fail(std::string("invalid literal, expected '") + word + "'");
  }

  JsonValue parse_value(int depth) {
    if (depth > MAX_DEPTH) fail("nesting too deep");
    if (i_ >= n_) fail("unexpected end of input");
    JsonValue v;
    char c = p_[i_];
    if (c == '{') {
      v.kind = JsonValue::Kind::object;
      ++i_;
      skip_ws();
      if (peek() == '}') {
        ++i_;
        return v;
      }
      for (;;) {
        skip_ws();
        if (peek() != '"') fail("expected a string key");
        std::string key = parse_string();
        skip_ws();
        expect(':');
        skip_ws();
        JsonValue item = parse_value(depth + 1);
        v.members.emplace_back(std::move(key), std::move(item));
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = JsonValue::Kind::array;
      ++i_;
      skip_ws();
      if (peek() == ']') {
        ++i_;
        return v;
      }
      for (;;) {
        skip_ws();
        v.items.push_back(parse_value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = JsonValue::Kind::string;
      v.s = parse_string();
      return v;
    }
    if (c == 't') {
      literal("true");
      v.kind = JsonValue::Kind::boolean;
      v.b = true;
      return v;
    }
    if (c == 'f') {
      literal("false");
      v.kind = JsonValue::Kind::boolean;
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "unexpected byte 0x%02x", unsigned(static_cast<unsigned char>(c)));
      fail(buf);
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  JsonValue parse_number() {
    JsonValue v;
    v.kind = JsonValue::Kind::number;
    size_t start = i_;
    bool neg = false;
    if (peek() == '-') {
      neg = true;
      ++i_;
    }
    if (!(peek() >= '0' && peek() <= '9')) fail("invalid number");
    bool overflow = false;
    uint64_t u = 0;
    if (peek() == '0') {
      ++i_;
    } else {
      while (peek() >= '0' && peek() <= '9') {
        uint64_t d = uint64_t(p_[i_] - '0');
        if (u > (UINT64_MAX - d) / 10) overflow = true;
        u = u * 10 + d;
        ++i_;
      }
    }
    bool integral = true;
    if (peek() == '.') {
      integral = false;
      ++i_;
      if (!(peek() >= '0' && peek() <= '9')) fail("invalid number");
      while (peek() >= '0' && peek() <= '9') ++i_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!(peek() >= '0' && peek() <= '9')) fail("invalid number");
      while (peek() >= '0' && peek() <= '9') ++i_;
    }
    v.s.assign(p_ + start, i_ - start);
    v.is_uint = integral && !neg && !overflow;
    v.u = v.is_uint ? u : 0;
    return v;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }
  uint32_t hex4() {
    if (n_ - i_ < 4) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      char c = p_[i_];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= n_) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(p_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("control character in string");
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (i_ >= n_) fail("unterminated escape");
      char e = p_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (n_ - i_ < 2 || p_[i_] != '\\' || p_[i_ + 1] != 'u') fail("unpaired surrogate");
            i_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("unpaired surrogate");
          }
          put_utf8(out, cp);
          break;
        }
        default: fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }
};

inline JsonValue parse_json(const char* p, size_t n) { return JsonParser(p, n).parse_document(); }

/// Writes s as a JSON string literal (with quotes).
inline std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) {
      char buf[8];
      static const char* hex = "0123456789abcdef";
      buf[0] = '\\', buf[1] = 'u', buf[2] = '0', buf[3] = '0', buf[4] = hex[c >> 4], buf[5] = hex[c & 15], buf[6] = 0;
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

}  // namespace zipcomm_file
