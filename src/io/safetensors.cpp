#include "io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "io/json.hpp"
#include "ops/ops.hpp"

namespace nx {
namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // the reference implementation's bound

const char* st_dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

DType parse_dtype(const std::string& s, const std::string& name) {
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool})
    if (s == st_dtype_name(d)) return d;
  fail(NX_ERR_IO, current_api(), ": tensor \"", name, "\" has unsupported dtype \"", s, "\"");
}

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  fail(NX_ERR_IO, current_api(), ": ", path, " is not a valid SafeTensors file: ", why);
}

}  // namespace

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(NX_ERR_IO, current_api(), ": cannot open ", path);
  const uint64_t size = uint64_t(in.tellg());
  in.seekg(0);
  if (size < 8) corrupt(path, cat("file is ", size, " bytes, shorter than the 8-byte header length"));
  unsigned char lenbuf[8];
  in.read(reinterpret_cast<char*>(lenbuf), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | lenbuf[i];
  if (n > kMaxHeader) corrupt(path, cat("header length ", n, " exceeds the limit of ", kMaxHeader, " bytes"));
  if (n > size - 8) corrupt(path, cat("header length ", n, " runs past the end of the ", size, "-byte file"));
  std::string header(size_t(n), '\0');
  in.read(header.data(), std::streamsize(n));
  if (header.empty() || header[0] != '{') corrupt(path, "header does not start with '{'");
  json::Value root = json::parse(header);
  if (root.kind != json::Value::Object) corrupt(path, "header is not a JSON object");

  SafeTensorsFile f;
  const uint64_t data_size = size - 8 - n;
  for (auto& [name, v] : root.object) {
    if (name == "__metadata__") {
      if (v.kind != json::Value::Object) corrupt(path, "__metadata__ is not an object");
      for (auto& [k, s] : v.object) {
        if (s.kind != json::Value::String) corrupt(path, cat("metadata value of \"", k, "\" is not a string"));
        f.metadata_[k] = s.string;
      }
      continue;
    }
    if (v.kind != json::Value::Object) corrupt(path, cat("entry \"", name, "\" is not an object"));
    const json::Value *dt = nullptr, *shape = nullptr, *offsets = nullptr;
    for (auto& [k, field] : v.object) {
      if (k == "dtype") dt = &field;
      else if (k == "shape") shape = &field;
      else if (k == "data_offsets") offsets = &field;
      else corrupt(path, cat("entry \"", name, "\" has unknown field \"", k, "\""));
    }
    if (!dt || dt->kind != json::Value::String || !shape || shape->kind != json::Value::Array || !offsets ||
        offsets->kind != json::Value::Array || offsets->array.size() != 2)
      corrupt(path, cat("entry \"", name, "\" needs dtype (string), shape (array) and data_offsets ([begin, end])"));
    SafeTensorsEntry e;
    e.name = name;
    e.dtype = parse_dtype(dt->string, name);
    uint64_t count = 1;
    for (const auto& d : shape->array) {
      if (d.kind != json::Value::Number || !d.is_integer || d.integer < 0)
        corrupt(path, cat("entry \"", name, "\" has a shape entry that is not a non-negative integer"));
      e.shape.push_back(d.integer);
      if (d.integer && count > (uint64_t(1) << 62) / uint64_t(d.integer)) corrupt(path, cat("entry \"", name, "\" is too large"));
      count *= uint64_t(d.integer);
    }
    for (const auto& o : offsets->array)
      if (o.kind != json::Value::Number || !o.is_integer || o.integer < 0)
        corrupt(path, cat("entry \"", name, "\" has data_offsets that are not non-negative integers"));
    e.begin = uint64_t(offsets->array[0].integer);
    e.end = uint64_t(offsets->array[1].integer);
    if (e.begin > e.end) corrupt(path, cat("entry \"", name, "\" has begin ", e.begin, " after end ", e.end));
    if (e.end > data_size)
      corrupt(path, cat("entry \"", name, "\" ends at ", e.end, ", past the ", data_size, "-byte data section"));
    if (e.end - e.begin != count * dtype_size(e.dtype))
      corrupt(path, cat("entry \"", name, "\" has ", e.end - e.begin, " bytes but shape ", shape_str(e.shape), " of ",
                        dtype_name(e.dtype), " needs ", count * dtype_size(e.dtype)));
    f.entries_.push_back(std::move(e));
  }
  // The data section must be covered exactly: no overlaps, no holes.
  std::vector<const SafeTensorsEntry*> by_offset;
  for (const auto& e : f.entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin || (a->begin == b->begin && a->end < b->end); });
  uint64_t at = 0;
  for (const auto* e : by_offset) {
    if (e->begin < at) corrupt(path, cat("entry \"", e->name, "\" overlaps the previous tensor (begins at ", e->begin, ", previous ends at ", at, ")"));
    if (e->begin > at) corrupt(path, cat("hole in the data section before \"", e->name, "\" (bytes ", at, "..", e->begin, ")"));
    at = e->end;
  }
  if (at != data_size) corrupt(path, cat("data section has ", data_size - at, " trailing bytes not owned by any tensor"));
  f.data_.resize(size_t(data_size));
  in.read(f.data_.data(), std::streamsize(data_size));
  if (!in) fail(NX_ERR_IO, current_api(), ": read error on ", path);
  return f;
}

Tensor SafeTensorsFile::get(const std::string& name, Device device) const {
  for (const auto& e : entries_)
    if (e.name == name) return from_data(data_.data() + e.begin, e.shape, e.dtype, device);
  fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": no tensor named \"", name, "\" in the file");
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  auto sorted = tensors;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first == sorted[i - 1].first)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the name \"", sorted[i].first, "\" appears twice");
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json::quote(k) + ":" + json::quote(v);
      first = false;
    }
    header += "}";
  }
  uint64_t at = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Tensor& t = sorted[i].second;
    std::string shape;
    for (int64_t d : t.shape()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    if (header.size() > 1) header += ",";
    header += json::quote(sorted[i].first) + ":{\"dtype\":\"" + st_dtype_name(t.dtype()) + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + t.nbytes()) + "]}";
    at += t.nbytes();
  }
  header += "}";
  while ((header.size() + 8) % 8) header += ' ';  // keep the data section 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(NX_ERR_IO, current_api(), ": cannot create ", path);
  uint64_t n = header.size();
  unsigned char lenbuf[8];
  for (int i = 0; i < 8; ++i) lenbuf[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(lenbuf), 8);
  out.write(header.data(), std::streamsize(n));
  for (const auto& [name, t] : sorted) {
    std::vector<char> buf(t.nbytes());
    copy_to_host(t, buf.data(), buf.size());
    out.write(buf.data(), std::streamsize(buf.size()));
  }
  if (!out) fail(NX_ERR_IO, current_api(), ": write error on ", path);
}

}  // namespace nx
