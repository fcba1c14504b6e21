#include "io/json.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace nx::json {
namespace {

struct Parser {
  const std::string& s;
  size_t i = 0;
  int depth = 0;

  [[noreturn]] void bad(const char* what) {
    fail(NX_ERR_IO, current_api(), ": malformed JSON header: ", what, " at byte ", i);
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) { ++i; return true; }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) bad("unexpected character");
  }
  std::string str() {
    ws();
    if (i >= s.size() || s[i] != '"') bad("expected a string");
    ++i;
    std::string out;
    while (true) {
      if (i >= s.size()) bad("unterminated string");
      char c = s[i++];
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) bad("control character in string");
      if (c != '\\') { out += c; continue; }
      if (i >= s.size()) bad("unterminated escape");
      char e = s[i++];
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
          if (i + 4 > s.size()) bad("short \\u escape");
          unsigned cp = unsigned(std::strtoul(s.substr(i, 4).c_str(), nullptr, 16));
          i += 4;
          // UTF-8 encode (surrogate pairs are kept as two code units' encodings)
          if (cp < 0x80) out += char(cp);
          else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
          else { out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
          break;
        }
        default: bad("bad escape");
      }
    }
    return out;
  }
  Value value() {
    if (++depth > 64) bad("nesting too deep");
    ws();
    if (i >= s.size()) bad("unexpected end");
    Value v;
    char c = s[i];
    if (c == '{') {
      ++i;
      v.kind = Value::Object;
      if (!eat('}')) {
        do {
          std::string k = str();
          expect(':');
          v.object.emplace_back(std::move(k), value());
        } while (eat(','));
        expect('}');
      }
    } else if (c == '[') {
      ++i;
      v.kind = Value::Array;
      if (!eat(']')) {
        do v.array.push_back(value()); while (eat(','));
        expect(']');
      }
    } else if (c == '"') {
      v.kind = Value::String;
      v.string = str();
    } else if (s.compare(i, 4, "true") == 0) {
      v.kind = Value::Bool; v.boolean = true; i += 4;
    } else if (s.compare(i, 5, "false") == 0) {
      v.kind = Value::Bool; i += 5;
    } else if (s.compare(i, 4, "null") == 0) {
      i += 4;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t start = i;
      if (s[i] == '-') ++i;
      bool integer = true;
      while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-')) {
        if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') integer = false;
        ++i;
      }
      std::string num = s.substr(start, i - start);
      v.kind = Value::Number;
      char* end = nullptr;
      v.number = std::strtod(num.c_str(), &end);
      if (!end || *end) bad("bad number");
      v.is_integer = integer && num.size() < 19;
      if (v.is_integer) v.integer = std::strtoll(num.c_str(), nullptr, 10);
    } else {
      bad("unexpected character");
    }
    --depth;
    return v;
  }
};

}  // namespace

Value parse(const std::string& text) {
  Parser p{text};
  Value v = p.value();
  p.ws();
  if (p.i != text.size()) p.bad("trailing characters");
  return v;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += c; }
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
      out += buf;
    } else out += c;
  }
  return out + "\"";
}

}  // namespace nx::json
