// A small strict JSON reader for SafeTensors headers: objects, arrays, strings, integers.
// Malformed input raises NX_ERR_IO; nesting depth is bounded.
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
  bool is_integer = false;
  int64_t integer = 0;
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;  // file order kept
};

Value parse(const std::string& text);
std::string quote(const std::string& s);

}  // namespace nx::json
