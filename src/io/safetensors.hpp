// SafeTensors (https://huggingface.co/docs/safetensors): 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the data.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace nx {

struct SafeTensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // offsets into the data section
};

class SafeTensorsFile {
 public:
  // Reads and validates the whole file; NX_ERR_IO with a reason otherwise.
  static SafeTensorsFile open(const std::string& path);
  const std::vector<SafeTensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  Tensor get(const std::string& name, Device device) const;

 private:
  std::vector<SafeTensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  std::vector<char> data_;
};

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace nx
