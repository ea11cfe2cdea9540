// The GGUF container (llama.cpp's model file, version 3; little-endian throughout):
//   "GGUF"  u32 version  u64 n_tensors  u64 n_kv
//   n_kv ×      string key, u32 value type, value  (strings: u64 length + bytes; arrays: u32 element type,
//               u64 count, the elements)
//   n_tensors × string name, u32 n_dims, u64 ne[n_dims] (ne[0] the fastest-varying: a PyTorch [out, in]
//               weight is ne = [in, out]), u32 ggml type, u64 offset (from the data section's start)
//   padding to general.alignment (32 when absent), then the data section, each tensor at an aligned offset.
// GgufReader parses and checks all of it before any tensor is read; write_gguf writes a file through a
// temporary name and a rename. What the tensors' bytes mean (block formats): ggml_types.h.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/ckpt/gguf/ggml_types.h"

namespace meshtrain::ckpt::gguf {

// A metadata value's type, as the file numbers them.
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9, U64 = 10,
  I64 = 11, F64 = 12
};

// One metadata value: a number, bool or string, or (type Array) a JSON array of elements of type `elem`.
struct Value {
  ValueType type = ValueType::String;
  ValueType elem = ValueType::U8;  // Array only
  nlohmann::json value;
};

inline Value u32_value(uint64_t v) { return {ValueType::U32, ValueType::U8, v}; }
inline Value f32_value(double v) { return {ValueType::F32, ValueType::U8, v}; }
inline Value bool_value(bool v) { return {ValueType::Bool, ValueType::U8, v}; }
inline Value string_value(std::string v) { return {ValueType::String, ValueType::U8, std::move(v)}; }
inline Value array_value(ValueType elem, nlohmann::json items) { return {ValueType::Array, elem, std::move(items)}; }

// Metadata in the order it is written (llama.cpp reads by key; the order only keeps files comparable).
using Metadata = std::vector<std::pair<std::string, Value>>;

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;     // ggml order: ne[0] varies fastest
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;         // absolute, in the file
  uint64_t bytes = 0;          // ggml_bytes(type, ne)

  int64_t numel() const;
};

class GgufReader {
 public:
  // Parses the header, metadata and tensor infos of `path`; UserError naming the file for a bad magic, a
  // version other than 2 or 3, a truncated file, a tensor type this reader does not know, or tensor data
  // beyond the end of the file.
  explicit GgufReader(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  bool has(const std::string& key) const { return metadata_.count(key) > 0; }
  // The value of `key`; UserError naming the file and the key when it is missing or not a number/string.
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  std::string string(const std::string& key) const;
  // The tensor's bytes as stored.
  std::vector<uint8_t> read(const TensorInfo& t) const;

 private:
  std::string path_;
  mutable std::ifstream in_;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
};

// A tensor to write: its name, ggml shape and type, and a function that gives its bytes when their turn comes
// (ggml_bytes(type, ne) of them), so a model is never held quantized in memory all at once.
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> ne;
  GgmlType type = GgmlType::F32;
  std::function<std::vector<uint8_t>()> bytes;
};

// Writes a version-3 file with alignment 32 to path + ".tmp", fsyncs it and renames it to `path`: a crash leaves
// no GGUF under the final name. `on_tensor(i)` runs after tensor i is written (progress lines).
void write_gguf(const std::string& path, const Metadata& metadata, const std::vector<TensorToWrite>& tensors,
                const std::function<void(size_t)>& on_tensor = {});

}  // namespace meshtrain::ckpt::gguf
