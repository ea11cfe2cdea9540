#include "meshtrain/ckpt/checkpoint_reader.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/ScalarType.h>

#include <filesystem>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/range_reader.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/progress_meter.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

bool is_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kDouble;
}

// One saved shard this rank reads: straight into its destination when the saved block is the wanted block
// in the same dtype in contiguous host memory, else into a staging buffer whose intersection with the wanted
// block is copied afterwards (another layout's block, another dtype, device memory).
struct ShardRead {
  ReadRange range;
  uint32_t expected_crc = 0;
  at::Tensor staged;            // undefined when read in place
  at::Tensor src_view, dst_view;  // staged only: the intersection in the buffer and in the destination
};

// Staged bytes a batch may hold at once: the whole load is never staged together.
constexpr uint64_t kStageBatch = 1ull << 30;

// The shards of `rec` that intersect `w`'s block, appended to `reads`; checks that they cover it.
void plan_tensor(const std::string& dir, const TensorRecord& rec, at::ScalarType saved, ShardedTensor& w,
                 std::vector<ShardRead>& reads) {
  const size_t D = w.global_shape.size();
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
    ShardRead r;
    r.range.path = (fs::path(dir) / s.file).string();
    r.range.offset = s.begin;
    r.range.length = s.end - s.begin;
    r.range.what = w.name;
    r.range.checksum = s.castagnoli ? ReadRange::Checksum::crc32c : ReadRange::Checksum::crc32;
    r.expected_crc = s.crc;
    int64_t numel = 1;
    for (int64_t e : s.shape) numel *= e;
    MT_USER_CHECK(s.end >= s.begin && r.range.length == static_cast<uint64_t>(numel) * c10::elementSize(saved),
                  r.range.path, ": tensor '", w.name, "' has ", s.end - s.begin, " bytes in meta.json, its shape and ",
                  "dtype need ", numel * static_cast<int64_t>(c10::elementSize(saved)));
    at::Tensor dst = w.local;
    for (size_t d = 0; d < D; ++d) dst = dst.narrow(static_cast<int64_t>(d), lo[d] - w.offsets[d], hi[d] - lo[d]);
    if (saved == w.local.scalar_type() && dst.is_cpu() && dst.is_contiguous() && dst.sizes().vec() == s.shape) {
      r.range.dest = dst.data_ptr();  // same block, same dtype, host memory: no staging copy
    } else {
      r.staged = at::empty(s.shape, at::TensorOptions().dtype(saved));
      r.range.dest = r.staged.data_ptr();
      at::Tensor src = r.staged;
      for (size_t d = 0; d < D; ++d) src = src.narrow(static_cast<int64_t>(d), lo[d] - s.offsets[d], hi[d] - lo[d]);
      r.src_view = src;
      r.dst_view = dst;
    }
    reads.push_back(std::move(r));
    filled += vol;
  }
  MT_USER_CHECK(filled == w.local.numel(), dir, ": the saved shards of '", w.name, "' cover ", filled, " of the ",
                w.local.numel(), " elements this rank needs (an incomplete checkpoint)");
}

// Reads one batch, verifies every shard's checksum, then copies the staged intersections into place.
void read_batch(std::vector<ShardRead>& batch, ReadOptions opts, ProgressMeter& progress) {
  std::vector<ReadRange> ranges;
  ranges.reserve(batch.size());
  for (auto& r : batch) ranges.push_back(std::move(r.range));
  opts.progress = &progress;
  read_ranges(ranges, opts);
  for (size_t i = 0; i < batch.size(); ++i) {
    const ReadRange& rr = ranges[i];
    const bool c = rr.checksum == ReadRange::Checksum::crc32c;
    MT_USER_CHECK(rr.crc == batch[i].expected_crc, rr.path, ": tensor '", rr.what, "' fails its checksum (",
                  c ? "crc32c " : "crc32 ", rr.crc, ", expected ", batch[i].expected_crc, "): the checkpoint is corrupt");
    if (batch[i].staged.defined()) batch[i].dst_view.copy_(batch[i].src_view);
  }
  batch.clear();
}

}  // namespace

LoadedCheckpoint load_into(const std::string& path, std::vector<ShardedTensor>& wanted) {
  at::NoGradGuard no_grad;  // `local` may be a parameter (a leaf that requires grad): filled in place
  LoadedCheckpoint out;
  out.path = resolve_checkpoint_dir(path);
  out.meta = read_meta(out.path);
  // Every check before the first byte is read: a wrong checkpoint fails at once, not after minutes of reading.
  std::vector<ShardRead> reads;
  for (auto& w : wanted) {
    auto it = out.meta.tensors.find(w.name);
    if (it == out.meta.tensors.end())
      throw IncompatibleCheckpoint(cat(out.path, "/meta.json: tensor '", w.name, "' is missing from the checkpoint (",
                                       out.meta.tensors.size(), " tensors saved; a different model or optimizer?)"));
    const TensorRecord& rec = it->second;
    if (rec.shape != w.global_shape)
      throw IncompatibleCheckpoint(cat(out.path, ": tensor '", w.name, "' has global shape ", shape_text(rec.shape),
                                       " in the checkpoint, the current run needs ", shape_text(w.global_shape)));
    const at::ScalarType saved = dtype_from_safetensors(rec.dtype);
    if (saved != w.local.scalar_type() && !(is_float(saved) && is_float(w.local.scalar_type())))
      throw IncompatibleCheckpoint(cat(out.path, ": tensor '", w.name, "' is ", rec.dtype, " in the checkpoint, the "
                                       "current run needs ", dtype_to_safetensors(w.local.scalar_type()),
                                       " (only floating-point dtypes convert)"));
    MT_CHECK(w.offsets.size() == w.global_shape.size() && static_cast<size_t>(w.local.dim()) == w.global_shape.size(),
             "load_into: '", w.name, "': offsets/local rank differ from the global shape's");
    plan_tensor(out.path, rec, saved, w, reads);
  }
  for (const auto& r : reads) out.bytes_read += r.range.length;
  ProgressMeter progress("load " + fs::path(out.path).filename().string(), out.bytes_read);
  const ReadOptions opts = ReadOptions::from_env();
  std::vector<ShardRead> batch;
  uint64_t staged = 0;
  for (auto& r : reads) {
    staged += r.staged.defined() ? r.range.length : 0;
    batch.push_back(std::move(r));
    if (staged >= kStageBatch) {
      read_batch(batch, opts, progress);
      staged = 0;
    }
  }
  if (!batch.empty()) read_batch(batch, opts, progress);
  progress.finish();
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
