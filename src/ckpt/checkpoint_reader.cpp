#include "meshtrain/ckpt/checkpoint_reader.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/error.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

class ReadFile {
 public:
  explicit ReadFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    MT_USER_CHECK(fd_ >= 0, path, ": cannot open checkpoint file: ", std::strerror(errno));
  }
  ~ReadFile() { ::close(fd_); }
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  void pread_exact(void* p, uint64_t n, uint64_t off, const std::string& tensor) const {
    char* c = static_cast<char*>(p);
    while (n > 0) {
      ssize_t r = ::pread(fd_, c, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      SYS_CHECK(r, "read ", path_);
      MT_USER_CHECK(r > 0, path_, ": tensor '", tensor, "' is truncated (the file ends at byte ", off,
                    "): the checkpoint is incomplete or damaged");
      c += r;
      off += static_cast<uint64_t>(r);
      n -= static_cast<uint64_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_;
};

bool is_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kDouble;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Reads one saved shard's bytes into a CPU tensor of its shape and dtype and checks its CRC-32.
void read_shard(const ReadFile& f, const std::string& file_path, const std::string& name, const ShardRecord& s,
                at::Tensor& out) {
  const uint64_t n = s.end - s.begin;
  MT_USER_CHECK(s.end >= s.begin && n == static_cast<uint64_t>(out.numel()) * out.element_size(), file_path,
                ": tensor '", name, "' has ", n, " bytes in meta.json, its shape and dtype need ",
                out.numel() * out.element_size());
  if (n) f.pread_exact(out.data_ptr(), n, s.begin, name);
  const uint32_t got = s.castagnoli ? crc32c(out.data_ptr(), n) : crc32(out.data_ptr(), n);
  MT_USER_CHECK(got == s.crc, file_path, ": tensor '", name, "' fails its checksum (", s.castagnoli ? "crc32c " : "crc32 ", got, ", expected ",
                s.crc, "): the checkpoint is corrupt");
}

}  // namespace

LoadedCheckpoint load_into(const std::string& path, std::vector<ShardedTensor>& wanted) {
  at::NoGradGuard no_grad;  // `local` may be a parameter (a leaf that requires grad): filled in place
  LoadedCheckpoint out;
  out.path = resolve_checkpoint_dir(path);
  out.meta = read_meta(out.path);
  std::map<std::string, std::unique_ptr<ReadFile>> files;
  auto file = [&](const std::string& name) -> const ReadFile& {
    auto& f = files[name];
    if (!f) f = std::make_unique<ReadFile>((fs::path(out.path) / name).string());
    return *f;
  };
  for (auto& w : wanted) {
    auto it = out.meta.tensors.find(w.name);
    MT_USER_CHECK(it != out.meta.tensors.end(), out.path, "/meta.json: tensor '", w.name, "' is missing from the "
                  "checkpoint (", out.meta.tensors.size(), " tensors saved; a different model or optimizer?)");
    const TensorRecord& rec = it->second;
    MT_USER_CHECK(rec.shape == w.global_shape, out.path, ": tensor '", w.name, "' has global shape ",
                  shape_str(rec.shape), " in the checkpoint, the current run needs ", shape_str(w.global_shape));
    const at::ScalarType saved = dtype_from_safetensors(rec.dtype);
    MT_USER_CHECK(saved == w.local.scalar_type() || (is_float(saved) && is_float(w.local.scalar_type())), out.path,
                  ": tensor '", w.name, "' is ", rec.dtype, " in the checkpoint, the current run needs ",
                  dtype_to_safetensors(w.local.scalar_type()), " (only floating-point dtypes convert)");
    const size_t D = w.global_shape.size();
    MT_CHECK(w.offsets.size() == D && static_cast<size_t>(w.local.dim()) == D, "load_into: '", w.name,
             "': offsets/local rank differ from the global shape's");
    int64_t filled = 0;
    for (const auto& s : rec.shards) {
      // The intersection of the saved block and the wanted block, per dim: [lo, hi).
      std::vector<int64_t> lo(D), hi(D);
      int64_t vol = 1;
      for (size_t d = 0; d < D; ++d) {
        lo[d] = std::max(s.offsets[d], w.offsets[d]);
        hi[d] = std::min(s.offsets[d] + s.shape[d], w.offsets[d] + w.local.size(static_cast<int64_t>(d)));
        vol *= std::max<int64_t>(0, hi[d] - lo[d]);
      }
      if (vol == 0) continue;
      const std::string file_path = (fs::path(out.path) / s.file).string();
      at::Tensor dst = w.local;
      for (size_t d = 0; d < D; ++d) dst = dst.narrow(static_cast<int64_t>(d), lo[d] - w.offsets[d], hi[d] - lo[d]);
      // Same block, same dtype, contiguous CPU storage: read straight into it (no staging copy).
      if (saved == w.local.scalar_type() && dst.is_cpu() && dst.is_contiguous() && dst.sizes().vec() == s.shape) {
        read_shard(file(s.file), file_path, w.name, s, dst);
      } else {
        at::Tensor buf = at::empty(s.shape, at::TensorOptions().dtype(saved));
        read_shard(file(s.file), file_path, w.name, s, buf);
        at::Tensor src = buf;
        for (size_t d = 0; d < D; ++d) src = src.narrow(static_cast<int64_t>(d), lo[d] - s.offsets[d], hi[d] - lo[d]);
        dst.copy_(src);
      }
      filled += vol;
    }
    MT_USER_CHECK(filled == w.local.numel(), out.path, ": the saved shards of '", w.name, "' cover ", filled, " of the ",
                  w.local.numel(), " elements this rank needs (an incomplete checkpoint)");
  }
  return out;
}

std::map<std::string, at::Tensor> load_full(const std::string& path, const std::string& prefix,
                                            LoadedCheckpoint* info) {
  const std::string dir = resolve_checkpoint_dir(path);
  const CheckpointMeta meta = read_meta(dir);
  std::vector<ShardedTensor> wanted;
  for (const auto& [name, rec] : meta.tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    wanted.push_back({name, rec.shape, std::vector<int64_t>(rec.shape.size(), 0),
                      at::empty(rec.shape, at::TensorOptions().dtype(dtype_from_safetensors(rec.dtype))), true});
  }
  auto loaded = load_into(dir, wanted);
  if (info) *info = std::move(loaded);
  std::map<std::string, at::Tensor> out;
  for (auto& w : wanted) out.emplace(w.name, std::move(w.local));
  return out;
}

}  // namespace meshtrain::ckpt
