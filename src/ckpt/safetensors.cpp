#include "meshtrain/ckpt/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/range_reader.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/progress_meter.h"

namespace meshtrain::ckpt {
namespace {

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    SYS_CHECK(w, "write ", path);
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void pread_all(int fd, void* p, size_t n, uint64_t off, const std::string& path) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::pread(fd, c, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    SYS_CHECK(r, "read ", path);
    MT_USER_CHECK(r > 0, path, ": truncated (unexpected end of file at byte ", off, ")");
    c += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<size_t>(r);
  }
}

struct Fd {
  int fd;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

}  // namespace

std::string dtype_to_safetensors(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kDouble: return "F64";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: throw Error(cat("safetensors: unsupported dtype ", c10::toString(t)));
  }
}

namespace {

const std::map<std::string, at::ScalarType>& dtype_names() {
  static const std::map<std::string, at::ScalarType> k = {
      {"F32", at::kFloat}, {"BF16", at::kBFloat16}, {"F16", at::kHalf}, {"F64", at::kDouble},
      {"I64", at::kLong},  {"I32", at::kInt},       {"U8", at::kByte},  {"BOOL", at::kBool}};
  return k;
}

}  // namespace

at::ScalarType dtype_from_safetensors(const std::string& s, const std::string& where) {
  auto it = dtype_names().find(s);
  MT_USER_CHECK(it != dtype_names().end(), where, where.empty() ? "" : ": ", "unsupported dtype '", s,
                "' (valid: ", safetensors_dtype_names(), ")");
  return it->second;
}

std::string safetensors_dtype_names() {
  std::string out;
  for (const auto& [name, t] : dtype_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

namespace {

// One pass over the bytes: each chunk is checksummed while it is hot in the cache, then written (the old
// CRC-all-then-write-all read every byte from memory twice). Every kFlush bytes the kernel is asked to start
// writing that range back (sync_file_range WRITE, non-blocking, as RocksDB's bytes_per_sync does), so the
// disk works while later tensors are still being copied into the page cache instead of only at the closing
// fsync. A waiting variant (WAIT_BEFORE on the previous range) was measured too: no faster, far noisier.
class StreamingWriter {
 public:
  StreamingWriter(int fd, const std::string& path) : fd_(fd), path_(path) {}

  uint32_t write(const void* p, uint64_t n, bool checksum) {
    constexpr uint64_t kChunk = 4u << 20;  // within L2/L3: the CRC leaves it in cache for write()
    const char* c = static_cast<const char*>(p);
    uint32_t crc = 0;
    for (uint64_t done = 0; done < n;) {
      const uint64_t k = std::min(kChunk, n - done);
      if (checksum) crc = crc32c(c + done, k, crc);
      write_all(fd_, c + done, k, path_);
      done += k;
      written_ += k;
      if (written_ - flushed_ >= kFlush) start_writeback();
    }
    return crc;
  }

  void finish() { SYS_CHECK(::fsync(fd_), "fsync ", path_); }

 private:
  static constexpr uint64_t kFlush = 64u << 20;

  void start_writeback() {
#if defined(__linux__)
    // Not every file system implements it (then it is a no-op or EINVAL): the final fsync is what makes
    // the file durable either way, so errors here are ignored.
    (void)::sync_file_range(fd_, static_cast<off_t>(flushed_), static_cast<off_t>(written_ - flushed_),
                            SYNC_FILE_RANGE_WRITE);
#endif
    flushed_ = written_;
  }

  int fd_;
  const std::string& path_;
  uint64_t written_ = 0, flushed_ = 0;
};

}  // namespace

std::map<std::string, TensorEntry> write_safetensors(const std::string& path,
                                                      const std::map<std::string, at::Tensor>& tensors,
                                                      const std::map<std::string, std::string>& metadata,
                                                      const std::function<void()>& after_first_tensor,
                                                      ProgressMeter* progress) {
  std::map<std::string, at::Tensor> cpu;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::map<std::string, TensorEntry> entries;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(at::kCPU).contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(c.numel()) * c.element_size();
    TensorEntry e{dtype_to_safetensors(c.scalar_type()), c.sizes().vec(), offset, offset + nbytes, 0};
    header[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
    entries[name] = e;
    cpu[name] = c;
    offset += nbytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the data section to 8 bytes, as the reference writer does
  const uint64_t hlen = h.size();

  Fd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  SYS_CHECK(f.fd, "open ", path);
  StreamingWriter w(f.fd, path);
  w.write(&hlen, 8, false);
  w.write(h.data(), h.size(), false);
  bool first = true;
  for (const auto& [name, c] : cpu) {
    TensorEntry& e = entries[name];
    e.crc = w.write(c.data_ptr(), e.end - e.begin, true);  // CRC-32C of the bytes as written
    if (progress) progress->add(e.end - e.begin), progress->report();
    if (first && after_first_tensor) after_first_tensor();
    first = false;
  }
  w.finish();
  for (auto& [name, e] : entries) {
    e.begin += 8 + hlen;
    e.end += 8 + hlen;
  }
  return entries;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  MT_USER_CHECK(f.fd >= 0, path, ": cannot open: ", std::strerror(errno));
  file_size_ = static_cast<uint64_t>(::lseek(f.fd, 0, SEEK_END));
  MT_USER_CHECK(file_size_ >= 8, path, ": truncated safetensors file (", file_size_, " bytes)");
  uint64_t hlen = 0;
  pread_all(f.fd, &hlen, 8, 0, path);
  MT_USER_CHECK(hlen <= file_size_ - 8 && hlen < (100u << 20), path, ": corrupt safetensors header length ", hlen);
  std::string h(hlen, '\0');
  pread_all(f.fd, h.data(), hlen, 8, path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(h);
  } catch (const std::exception& e) {
    throw UserError(cat(path, ": corrupt safetensors header: ", e.what()));
  }
  for (auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      for (auto& [k, mv] : v.items()) metadata_[k] = mv.get<std::string>();
      continue;
    }
    TensorEntry e;
    e.dtype = v.at("dtype").get<std::string>();
    e.shape = v.at("shape").get<std::vector<int64_t>>();
    e.begin = 8 + hlen + v.at("data_offsets")[0].get<uint64_t>();
    e.end = 8 + hlen + v.at("data_offsets")[1].get<uint64_t>();
    MT_USER_CHECK(e.end >= e.begin && e.end <= file_size_, path, ": tensor '", name, "' bytes [", e.begin, ", ",
                  e.end, ") lie beyond the file's ", file_size_, " bytes (truncated?)");
    entries_[name] = std::move(e);
  }
}

at::Tensor SafetensorsReader::read(const std::string& name) const {
  auto it = entries_.find(name);
  MT_USER_CHECK(it != entries_.end(), path_, ": no tensor '", name, "'");
  const auto& e = it->second;
  auto t = at::empty(e.shape, at::TensorOptions().dtype(dtype_from_safetensors(e.dtype, cat(path_, ": tensor '", name, "'"))));
  const uint64_t n = e.end - e.begin;
  MT_USER_CHECK(n == static_cast<uint64_t>(t.numel()) * t.element_size(), path_, ": tensor '", name, "' has ", n,
                " bytes, its shape and dtype need ", t.numel() * t.element_size());
  Fd f{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  MT_USER_CHECK(f.fd >= 0, path_, ": cannot open: ", std::strerror(errno));
  if (n) pread_all(f.fd, t.data_ptr(), n, e.begin, path_);
  return t;
}

std::map<std::string, at::Tensor> read_safetensors(const std::vector<std::string>& files, const std::string& label) {
  std::map<std::string, at::Tensor> out;
  std::map<std::string, std::string> from;  // tensor → the file that holds it
  std::vector<ReadRange> ranges;
  uint64_t total = 0;
  for (const auto& path : files) {
    const SafetensorsReader r(path);
    for (const auto& [name, e] : r.entries()) {
      MT_USER_CHECK(from.emplace(name, path).second, path, ": tensor '", name, "' is also in ", from[name]);
      const std::string where = cat(path, ": tensor '", name, "'");
      auto t = at::empty(e.shape, at::TensorOptions().dtype(dtype_from_safetensors(e.dtype, where)));
      const uint64_t n = e.end - e.begin;
      MT_USER_CHECK(n == static_cast<uint64_t>(t.numel()) * t.element_size(), where, " has ", n,
                    " bytes, its shape and dtype need ", t.numel() * t.element_size());
      ranges.push_back({path, e.begin, n, t.data_ptr(), name});
      total += n;
      out.emplace(name, std::move(t));
    }
  }
  ProgressMeter progress(label, total);
  ReadOptions opts = ReadOptions::from_env();
  opts.progress = &progress;
  read_ranges(ranges, opts);
  progress.finish();
  return out;
}

}  // namespace meshtrain::ckpt
