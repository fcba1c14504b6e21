#include "io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "core/atomic_file.hpp"
#include "io/json.hpp"
#include "ops/ops.hpp"

namespace nx {
namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's bound (MAX_HEADER_SIZE)

const char* st_dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::Bool: return "BOOL";
    case DType::I8: return "I8";
    case DType::F8E4M3: return "F8_E4M3";
    case DType::F8E5M2: return "F8_E5M2";
  }
  return "?";
}

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  fail(NX_ERR_IO, current_api(), ": ", path, " is not a valid SafeTensors file: ", why);
}

DType parse_dtype(const std::string& s, const std::string& name, const std::string& path) {
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool, DType::I8,
                  DType::F8E4M3, DType::F8E5M2})
    if (s == st_dtype_name(d)) return d;
  corrupt(path, cat("tensor ", json::quote(name), " has unsupported dtype ", json::quote(s)));
}

// JSON allows "\u0000" in a string, but a name or metadata string holding NUL could never be
// asked for through the C API (its strings end at NUL), so such a file is refused.
void refuse_nul(const std::string& path, const std::string& what, const std::string& text) {
  if (text.find('\0') != std::string::npos)
    corrupt(path, cat(what, " ", json::quote(text), " contains a NUL character (\\u0000), which no C string can name"));
}

}  // namespace

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  // The whole file is read into memory here (no mmap): a file truncated or rewritten after open
  // cannot fault the process later (no SIGBUS), and one cut while it is read is a short read,
  // NX_ERR_IO. The checks follow the format's reference reader (the safetensors crate): see
  // docs/hostile_files.md.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(NX_ERR_IO, current_api(), ": cannot open ", path);
  const std::streamoff end = in.tellg();
  if (end < 0) fail(NX_ERR_IO, current_api(), ": cannot find the size of ", path, " (not a regular file?)");
  const uint64_t size = uint64_t(end);
  in.seekg(0);
  if (size < 8) corrupt(path, cat("file is ", size, " bytes, shorter than the 8-byte header length"));
  unsigned char lenbuf[8];
  if (!in.read(reinterpret_cast<char*>(lenbuf), 8)) fail(NX_ERR_IO, current_api(), ": read error on ", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | lenbuf[i];
  if (n > kMaxHeader) corrupt(path, cat("header length ", n, " exceeds the limit of ", kMaxHeader, " bytes"));
  if (n > size - 8) corrupt(path, cat("header length ", n, " runs past the end of the ", size, "-byte file"));
  std::string header(size_t(n), '\0');
  if (!in.read(header.data(), std::streamsize(n)))
    fail(NX_ERR_IO, current_api(), ": read error on ", path, " (the file shrank while it was read?)");
  if (header.empty() || header[0] != '{') corrupt(path, "header does not start with '{'");
  json::ParseOptions options;  // strict: UTF-8, escapes, numbers, duplicate keys, depth and size bounds
  options.context = cat(path, " is not a valid SafeTensors file: ");
  json::Value root = json::parse(header, options);
  if (root.kind != json::Value::Object) corrupt(path, "header is not a JSON object");

  SafeTensorsFile f;
  const uint64_t data_size = size - 8 - n;
  for (auto& [name, v] : root.object) {
    if (name == "__metadata__") {
      if (v.kind == json::Value::Null) continue;  // the crate reads null as "no metadata" (an Option)
      if (v.kind != json::Value::Object) corrupt(path, "__metadata__ is not an object");
      for (auto& [k, s] : v.object) {
        refuse_nul(path, "metadata key", k);
        if (s.kind != json::Value::String) corrupt(path, cat("metadata value of ", json::quote(k), " is not a string"));
        refuse_nul(path, cat("metadata value of ", json::quote(k)), s.string);
        f.metadata_[k] = s.string;
      }
      continue;
    }
    refuse_nul(path, "tensor name", name);
    const std::string quoted = json::quote(name);
    if (v.kind != json::Value::Object) corrupt(path, cat("entry ", quoted, " is not an object"));
    const json::Value *dt = nullptr, *shape = nullptr, *offsets = nullptr;
    for (auto& [k, field] : v.object) {
      if (k == "dtype") dt = &field;
      else if (k == "shape") shape = &field;
      else if (k == "data_offsets") offsets = &field;
      else corrupt(path, cat("entry ", quoted, " has unknown field ", json::quote(k)));
    }
    if (!dt || dt->kind != json::Value::String || !shape || shape->kind != json::Value::Array || !offsets ||
        offsets->kind != json::Value::Array || offsets->array.size() != 2)
      corrupt(path, cat("entry ", quoted, " needs dtype (string), shape (array) and data_offsets ([begin, end])"));
    SafeTensorsEntry e;
    e.name = name;
    e.dtype = parse_dtype(dt->string, name, path);
    // The crate's checks: dims are usize (no sign, fraction or exponent), and the element count and
    // byte count are products checked for overflow, in order (so [2^40, 2^40, 0] overflows too).
    uint64_t count = 1;
    bool overflow = false;
    for (const auto& d : shape->array) {
      if (d.kind != json::Value::Number || !d.is_unsigned)
        corrupt(path, cat("entry ", quoted, " has a shape entry that is not a non-negative integer"));
      if (!d.is_integer)
        corrupt(path, cat("entry ", quoted, " has dimension ", d.unsigned_integer, ", more than a shape holds (int64)"));
      e.shape.push_back(d.integer);
      overflow = overflow || __builtin_mul_overflow(count, d.unsigned_integer, &count);
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(count, uint64_t(dtype_size(e.dtype)), &nbytes))
      corrupt(path, cat("entry ", quoted, " of shape ", shape_str(e.shape), " and dtype ", dtype_name(e.dtype),
                        ": its element or byte count overflows 64 bits"));
    for (const auto& o : offsets->array)
      if (o.kind != json::Value::Number || !o.is_unsigned)
        corrupt(path, cat("entry ", quoted, " has data_offsets that are not non-negative integers"));
    e.begin = offsets->array[0].unsigned_integer;
    e.end = offsets->array[1].unsigned_integer;
    if (e.begin > e.end) corrupt(path, cat("entry ", quoted, " has begin ", e.begin, " after end ", e.end));
    if (e.end > data_size)
      corrupt(path, cat("entry ", quoted, " ends at ", e.end, ", past the ", data_size, "-byte data section"));
    if (e.end - e.begin != nbytes)
      corrupt(path, cat("entry ", quoted, " has ", e.end - e.begin, " bytes but shape ", shape_str(e.shape), " of ",
                        dtype_name(e.dtype), " needs ", nbytes));
    f.entries_.push_back(std::move(e));
  }
  // The data section must be covered exactly: no overlaps, no holes.
  std::vector<const SafeTensorsEntry*> by_offset;
  for (const auto& e : f.entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin || (a->begin == b->begin && a->end < b->end); });
  uint64_t at = 0;
  for (const auto* e : by_offset) {
    if (e->begin < at) corrupt(path, cat("entry ", json::quote(e->name), " overlaps the previous tensor (begins at ", e->begin, ", previous ends at ", at, ")"));
    if (e->begin > at) corrupt(path, cat("hole in the data section before ", json::quote(e->name), " (bytes ", at, "..", e->begin, ")"));
    at = e->end;
  }
  if (at != data_size) corrupt(path, cat("data section has ", data_size - at, " trailing bytes not owned by any tensor"));
  f.data_.resize(size_t(data_size));
  in.read(f.data_.data(), std::streamsize(data_size));
  if (!in) fail(NX_ERR_IO, current_api(), ": read error on ", path, " (the file shrank while it was read?)");
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
      if (!first) header += ',';
      header += json::quote(k) + ":" + json::quote(v);
      first = false;
    }
    header += "}";
  }
  uint64_t at = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Tensor& t = sorted[i].second;
    std::string shape;
    for (int64_t d : t.shape()) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d);
    }
    if (header.size() > 1) header += ",";
    header += json::quote(sorted[i].first) + ":{\"dtype\":\"" + st_dtype_name(t.dtype()) + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + t.nbytes()) + "]}";
    at += t.nbytes();
  }
  header += "}";
  while ((header.size() + 8) % 8) header += ' ';  // keep the data section 8-byte aligned
  AtomicFile out(path);  // a failed or interrupted save leaves the previous file at path
  uint64_t n = header.size();
  unsigned char lenbuf[8];
  for (int i = 0; i < 8; ++i) lenbuf[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(lenbuf, 8);
  out.write(header);
  for (const auto& [name, t] : sorted) {
    std::vector<char> buf(t.nbytes());
    copy_to_host(t, buf.data(), buf.size());
    out.write(buf.data(), buf.size());
  }
  out.commit();
}

}  // namespace nx
