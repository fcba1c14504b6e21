#include "io/json.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string_view>

#include "core/error.hpp"

namespace nx::json {
namespace {

struct Parser {
  const std::string& s;
  const ParseOptions& options;
  size_t i = 0;
  int depth = 0;
  size_t values = 0;

  [[noreturn]] void bad(const std::string& what) {
    fail(NX_ERR_IO, current_api(), ": ", options.context, "malformed JSON header: ", what, " at byte ", i);
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) { ++i; return true; }
    return false;
  }
  void expect(char c, const char* what) {
    if (!eat(c)) bad(i < s.size() ? cat("expected ", what, ", found '", printable(s[i]), "'") : cat("expected ", what, ", found the end"));
  }
  static std::string printable(char c) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string(1, c);
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(u));
    return buf;
  }
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // The 4 hex digits after "\u" (i at the first); strtoul would take "12G4" as 0x12.
  unsigned hex4() {
    if (i + 4 > s.size()) bad("\\u escape cut short by the end");
    unsigned cp = 0;
    for (int k = 0; k < 4; ++k) {
      const int d = hex_digit(s[i + size_t(k)]);
      if (d < 0) bad(cat("\\u escape \"\\u", s.substr(i, 4), "\" is not 4 hex digits"));
      cp = cp * 16 + unsigned(d);
    }
    i += 4;
    return cp;
  }
  static void append_utf8(std::string& out, unsigned cp) {
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
  // Length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7: no overlong forms, no
  // surrogates, nothing past U+10FFFF), or 0.
  size_t utf8_length() const {
    auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
    auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return byte(k) >= lo && byte(k) <= hi; };
    const unsigned b0 = byte(0);
    if (b0 < 0x80) return 1;
    if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
    if (b0 == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
    if (b0 == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
    if (b0 >= 0xE1 && b0 <= 0xEF) return cont(1) && cont(2) ? 3 : 0;
    if (b0 == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    if (b0 >= 0xF1 && b0 <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
    if (b0 == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
    return 0;
  }
  std::string str() {
    ws();
    if (i >= s.size() || s[i] != '"') bad("expected a string");
    ++i;
    std::string out;
    while (true) {
      if (i >= s.size()) bad("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c == '"') { ++i; break; }
      if (c < 0x20) bad(cat("control character ", printable(char(c)), " in string"));
      if (c >= 0x80) {
        const size_t n = utf8_length();
        if (!n) bad(cat("invalid UTF-8 byte ", printable(char(c)), " in string"));
        out.append(s, i, n);
        i += n;
        continue;
      }
      ++i;
      if (c != '\\') { out += char(c); continue; }
      if (i >= s.size()) bad("unterminated escape");
      const char e = s[i++];
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
          const size_t at = i - 2;
          unsigned cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) { i = at; bad(cat("lone low surrogate \\u", s.substr(at + 2, 4))); }
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // must pair with a following \uDC00..\uDFFF
            if (s.compare(i, 2, "\\u") != 0) { i = at; bad(cat("lone high surrogate \\u", s.substr(at + 2, 4))); }
            i += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) { i = at; bad(cat("high surrogate \\u", s.substr(at + 2, 4), " not followed by a low surrogate")); }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: --i; bad(cat("bad escape \\", printable(e)));
      }
    }
    return out;
  }
  // A number by the JSON grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  void number(Value& v) {
    const size_t start = i;
    auto digit = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
    const bool negative = s[i] == '-';
    if (negative) ++i;
    if (!digit(i)) bad("a number needs a digit after '-'");
    if (s[i] == '0' && digit(i + 1)) bad("leading zero in a number");
    const size_t int_begin = i;
    while (digit(i)) ++i;
    const size_t int_end = i;
    size_t frac_begin = i, frac_end = i;
    if (i < s.size() && s[i] == '.') {
      ++i;
      if (!digit(i)) bad("a number needs a digit after '.'");
      frac_begin = i;
      while (digit(i)) ++i;
      frac_end = i;
    }
    bool has_exponent = false;
    int64_t exponent = 0;  // clamped: only its sign and rough size matter
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      has_exponent = true;
      ++i;
      bool exponent_negative = false;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) exponent_negative = s[i++] == '-';
      if (!digit(i)) bad("a number needs a digit in its exponent");
      while (digit(i)) exponent = std::min<int64_t>(exponent * 10 + (s[i++] - '0'), 1000000);
      if (exponent_negative) exponent = -exponent;
    }
    const std::string_view literal(s.data() + start, i - start);
    v.kind = Value::Number;
    if (frac_begin == frac_end && !has_exponent) {  // an integer literal: exact, as serde_json reads it
      uint64_t magnitude = 0;
      bool fits = true;
      for (size_t k = int_begin; k < int_end && fits; ++k)
        fits = !__builtin_mul_overflow(magnitude, 10u, &magnitude) && !__builtin_add_overflow(magnitude, uint64_t(s[k] - '0'), &magnitude);
      if (fits && !negative) {
        v.is_unsigned = true;
        v.unsigned_integer = magnitude;
        v.is_integer = magnitude <= uint64_t(INT64_MAX);
        v.integer = int64_t(magnitude);
      } else if (fits && negative && magnitude != 0 && magnitude <= uint64_t(INT64_MAX) + 1) {
        v.is_integer = true;  // -0 stays a float, as in serde_json
        v.integer = int64_t(0 - magnitude);
      }
    }
    const auto [end, ec] = std::from_chars(literal.data(), literal.data() + literal.size(), v.number);
    if (ec == std::errc::result_out_of_range) {
      // Decimal exponent of the leading digit: above 0 the value overflowed, else it underflowed
      // to 0 (serde_json refuses the first and reads the second as 0).
      size_t lead = int_begin;
      while (lead < int_end && s[lead] == '0') ++lead;
      int64_t magnitude10 = exponent;
      if (lead < int_end) {
        magnitude10 += int64_t(int_end - lead) - 1;
      } else {
        size_t k = frac_begin;
        while (k < frac_end && s[k] == '0') ++k;
        magnitude10 -= int64_t(k - frac_begin) + 1;
      }
      if (magnitude10 > 0) { i = start; bad(cat("number ", literal.substr(0, 40), " is out of range")); }
      v.number = negative ? -0.0 : 0.0;
    } else if (ec != std::errc() || end != literal.data() + literal.size()) {
      i = start;
      bad("bad number");
    }
  }
  Value value() {
    if (++depth > options.max_depth) bad(cat("nesting too deep (more than ", options.max_depth, " levels)"));
    if (++values > options.max_values) bad(cat("more than ", options.max_values, " values"));
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
          expect(':', "':'");
          v.object.push_back(Value::Member{std::move(k), value()});
        } while (eat(','));
        expect('}', "',' or '}'");
      }
      check_unique_keys(v);
    } else if (c == '[') {
      ++i;
      v.kind = Value::Array;
      if (!eat(']')) {
        do v.array.push_back(value()); while (eat(','));
        expect(']', "',' or ']'");
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
      number(v);
    } else {
      bad(cat("unexpected character '", printable(c), "'"));
    }
    --depth;
    return v;
  }
  // RFC 8259 leaves duplicate names to the reader; taking the first or the last silently would
  // let two readers of one file see different tensors, so a duplicate is an error.
  void check_unique_keys(const Value& v) {
    std::vector<const std::string*> keys;
    keys.reserve(v.object.size());
    for (const auto& member : v.object) keys.push_back(&member.first);
    std::sort(keys.begin(), keys.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
    for (size_t k = 1; k < keys.size(); ++k)
      if (*keys[k] == *keys[k - 1]) bad(cat("duplicate key ", quote(*keys[k]), " in an object"));
  }
};

}  // namespace

Value parse(const std::string& text, const ParseOptions& options) {
  Parser p{text, options};
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
