// A small strict JSON reader (RFC 8259, as serde_json reads it) for SafeTensors headers.
// Malformed input raises NX_ERR_IO naming the problem and the byte: invalid UTF-8, control
// characters, bad or lone-surrogate \u escapes, numbers outside the JSON grammar (leading zeros,
// '+', "1.") or out of range ("1e400"), duplicate keys in an object, nesting deeper than
// ParseOptions::max_depth, more values than ParseOptions::max_values. Strings may hold NUL (from \u0000);
// callers that hand strings to C decide what to do with it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nx::json {

struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  bool is_integer = false;  // an integer literal (no fraction or exponent) within int64; -0 is not
  int64_t integer = 0;
  bool is_unsigned = false;  // a non-negative integer literal within uint64 (serde_json's u64)
  uint64_t unsigned_integer = 0;
  std::string string;
  std::vector<Value> array;
  // Members in file order. A struct of its own rather than std::pair<std::string, Value>: a pair
  // of a still incomplete Value is refused by libstdc++'s checks under clang.
  struct Member;
  std::vector<Member> object;
};
struct Value::Member {
  std::string first;
  Value second;
};

struct ParseOptions {
  int max_depth = 64;                   // bounds the recursion, so hostile nesting cannot exhaust the stack
  size_t max_values = size_t(1) << 22;  // bounds the tree's memory (a value takes ~150 bytes)
  std::string context;                  // put before "malformed JSON header" in messages (e.g. the file)
};
Value parse(const std::string& text, const ParseOptions& options = {});
std::string quote(const std::string& s);

}  // namespace nx::json
