// safetensors files (the Hugging Face format): 8-byte little-endian header length, a JSON header mapping each
// tensor name to {dtype, shape, data_offsets [begin, end)} relative to the data section, then the data.
// Used for checkpoints (one file per rank) and for Hugging Face import/export.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "meshtrain/core/crc32.h"
#include "meshtrain/core/progress_meter.h"

namespace meshtrain::ckpt {

struct TensorEntry {
  std::string dtype;           // "F32", "BF16", "F16", "I64", "I32", "U8", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the file (absolute, header included)
  uint32_t crc = 0;             // CRC-32C of the bytes (filled by the writer)
};

// Writes `tensors` (CPU or device; copied to contiguous CPU) in name order to `path`, fsynced. Returns each
// tensor's absolute byte range and CRC-32. `metadata` goes in "__metadata__". `after_first_tensor` (tests:
// crash_point.h) runs once the header and the first tensor's bytes are written. `progress`, if given, counts
// the tensor bytes as they are written and reports from this thread (the caller starts and finishes it).
std::map<std::string, TensorEntry> write_safetensors(const std::string& path,
                                                      const std::map<std::string, at::Tensor>& tensors,
                                                      const std::map<std::string, std::string>& metadata = {},
                                                      const std::function<void()>& after_first_tensor = {},
                                                      ProgressMeter* progress = nullptr);

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // Reads only this tensor's byte range. Throws UserError naming file and tensor if absent or truncated.
  at::Tensor read(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
  uint64_t file_size_ = 0;
};

// Every tensor of `files` (CPU, saved dtype) through read_ranges (range_reader.h): large preads from a few
// threads straight into each tensor's memory, progress lines headed `label` when it takes a while. The same
// bytes SafetensorsReader::read gives, at the disk's sequential rate. UserError for a name in two files.
std::map<std::string, at::Tensor> read_safetensors(const std::vector<std::string>& files,
                                                   const std::string& label = "read");

std::string dtype_to_safetensors(at::ScalarType t);
// UserError "WHERE: unsupported dtype 'I8' (valid: …)" for a name meshtrain does not read; `where` names the
// file and tensor.
at::ScalarType dtype_from_safetensors(const std::string& s, const std::string& where = "");
// The dtype names dtype_from_safetensors accepts: "BF16, BOOL, F16, …".
std::string safetensors_dtype_names();

// Format-1 checkpoints store CRC-32 (IEEE) per tensor, format-2 CRC-32C per shard (core/crc32.h).
using meshtrain::crc32;
using meshtrain::crc32c;

}  // namespace meshtrain::ckpt
