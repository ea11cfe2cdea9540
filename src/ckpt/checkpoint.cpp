#include "meshtrain/ckpt/checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/crash_point.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/gather_strings.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/clock.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

std::string rank_file(int rank) { return log::sprintf("rank_%05d.safetensors", rank); }

std::vector<ShardedTensor> replicated(const std::map<std::string, at::Tensor>& tensors, int rank) {
  std::vector<ShardedTensor> out;
  for (const auto& [name, t] : tensors)
    out.push_back({name, t.sizes().vec(), std::vector<int64_t>(static_cast<size_t>(t.dim()), 0), t, rank == 0});
  return out;
}

uint64_t host_bytes(const std::map<std::string, at::Tensor>& host) {
  uint64_t bytes = 0;
  for (const auto& [n, h] : host) bytes += static_cast<uint64_t>(h.numel()) * h.element_size();
  return bytes;
}

SaveInfo replicated_info(const nlohmann::json& state, int world) {
  SaveInfo info;
  info.state = state;
  if (state.contains("config")) info.config = state["config"];
  info.mesh = {{"layout", "replicated"}, {"world_size", world}};
  return info;
}

// A gathered list that is an error object instead of shards: "rank R could not write its file: <reason>".
std::string write_error_line(size_t rank, const nlohmann::json& list) {
  return cat("rank ", rank, " could not write its file: ", list.value("error", std::string()));
}

// write_error_line() of the first rank whose gathered list is an error, else `otherwise`.
std::string failed_write_or(const std::vector<std::string>& rank_lists, const std::string& otherwise) {
  for (size_t r = 0; r < rank_lists.size(); ++r)
    if (const auto j = nlohmann::json::parse(rank_lists[r]); j.is_object()) return write_error_line(r, j);
  return otherwise;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string dir, int64_t keep, comm::CommPtr comm)
    : dir_(std::move(dir)), keep_(keep) {
  rank_ = comm ? comm->rank() : 0;
  world_ = comm ? comm->size() : 1;
  if (rank_ == 0) {
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) {
        log::warn("removing incomplete checkpoint %s (a save was interrupted)", e.path().c_str());
        remove_tree(e.path().string());
      }
    }
  }
  if (comm) {
    comm->barrier();
    // Its own sockets and op thread: the background writer's collectives never interleave with the step
    // loop's on `comm`.
    if (world_ > 1) ckpt_comm_ = comm->split(0, rank_);
  }
}

CheckpointManager::~CheckpointManager() {
  try {
    wait();
  } catch (const std::exception& e) {
    log::error("checkpoint: the last save failed: %s", e.what());
  }
}

void CheckpointManager::crash_point_at(const char* stage, int64_t step) const {
  // The test hook kills a rank in the middle of a disk checkpoint; in-memory snapshots never fire it.
  if (!own_blocks_only_) crash_point(stage, rank_, step);
}

std::string CheckpointManager::step_dir(int64_t step) const { return (fs::path(dir_) / step_dir_name(step)).string(); }

SaveStats CheckpointManager::save_async(int64_t step, const std::vector<ShardedTensor>& tensors,
                                        const SaveInfo& info) {
  return start_save(step, tensors, info, /*stage_cpu=*/true);
}

SaveStats CheckpointManager::save_staged_async(int64_t step, const std::vector<ShardedTensor>& tensors,
                                               const SaveInfo& info, std::function<void()> ready) {
  return start_save(step, tensors, info, /*stage_cpu=*/false, std::move(ready));
}

SaveStats CheckpointManager::start_save(int64_t step, const std::vector<ShardedTensor>& tensors, const SaveInfo& info,
                                        bool stage_cpu, std::function<void()> ready) {
  const auto t0 = Clock::now();
  SaveStats stats;
  stats.wait_s = wait();
  // Host copies of the blocks this rank writes. Pinned staging for device tensors makes the device-to-host
  // copy a DMA at full bus speed; CPU tensors are cloned because training goes on modifying them in place.
  std::vector<ShardedTensor> layout;
  std::map<std::string, at::Tensor> host;
  for (const auto& t : tensors) {
    MT_CHECK(t.offsets.size() == t.global_shape.size() && static_cast<size_t>(t.local.dim()) == t.global_shape.size(),
             "save: '", t.name, "': offsets/local rank differ from the global shape's");
    if (!t.write) continue;
    MT_CHECK(!host.count(t.name), "save: tensor '", t.name, "' is given twice");
    at::Tensor h;
    if (!stage_cpu && t.local.is_cpu()) {
      // A synchronous save (the caller is blocked until the commit) or the caller's own staging: its tensors
      // cannot change under the writer — written straight from them (no 1× state-size copy, no fresh pages).
      h = t.local.detach();
    } else {
      at::Tensor& s = staging_[t.name];
      if (!s.defined() || s.sizes() != t.local.sizes() || s.scalar_type() != t.local.scalar_type() ||
          (t.local.is_cuda() && !s.is_pinned()))
        s = at::empty(t.local.sizes(), t.local.options().device(at::kCPU).pinned_memory(t.local.is_cuda()));
      s.copy_(t.local.detach());
      h = s;
    }
    stats.bytes += static_cast<uint64_t>(h.numel()) * h.element_size();
    host.emplace(t.name, h);
    layout.push_back({t.name, t.global_shape, t.offsets, h, true});
  }
  crash_point_at("host_copy", step);
  stats.blocked_s = seconds_since(t0);
  log::debug("checkpoint step %lld: step loop blocked %.3fs (%.3fs waiting for the previous save), %.1f MB to write",
             static_cast<long long>(step), stats.blocked_s, stats.wait_s, static_cast<double>(stats.bytes) / 1e6);
  writer_ = std::thread([this, step, host = std::move(host), layout = std::move(layout), info,
                         ready = std::move(ready)]() mutable {
    try {
      if (ready) ready();
      write_and_commit(step, std::move(host), std::move(layout), std::move(info));
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  return stats;
}

double CheckpointManager::wait() {
  if (!writer_.joinable()) return 0;
  const auto t0 = Clock::now();
  writer_.join();
  const double s = seconds_since(t0);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return s;
}

std::string CheckpointManager::save(int64_t step, const std::vector<ShardedTensor>& tensors, const SaveInfo& info) {
  start_save(step, tensors, info, /*stage_cpu=*/false);
  wait();
  return step_dir(step);
}

SaveStats CheckpointManager::save_async(int64_t step, const std::map<std::string, at::Tensor>& tensors,
                                        const nlohmann::json& state) {
  return save_async(step, replicated(tensors, rank_), replicated_info(state, world_));
}

std::string CheckpointManager::save(int64_t step, const std::map<std::string, at::Tensor>& tensors,
                                    const nlohmann::json& state) {
  return save(step, replicated(tensors, rank_), replicated_info(state, world_));
}

void CheckpointManager::write_and_commit(int64_t step, std::map<std::string, at::Tensor> host,
                                         std::vector<ShardedTensor> layout, SaveInfo info) {
  const auto t0 = Clock::now();
  const fs::path tmp_dir = step_dir(step) + ".tmp";
  const uint64_t bytes = host_bytes(host);
  RankShards mine;
  std::string write_error;  // sent to rank 0 instead of a shard list, so no rank waits on a failed one
  try {
    // Every rank creates it (idempotent); stale ones were removed before the constructor's barrier.
    fs::create_directories(tmp_dir);
    if (!host.empty()) {
      const std::string file = rank_file(rank_);
      std::optional<ProgressMeter> progress;
      if (!progress_label_.empty()) progress.emplace(progress_label_, bytes);
      auto entries = write_safetensors((tmp_dir / file).string(), host, {{"format", "pt"}},
                                       [&] { crash_point_at("file_partial", step); },
                                       progress ? &*progress : nullptr);
      if (progress) progress->finish();
      for (const auto& t : layout) {
        const TensorEntry& e = entries.at(t.name);
        mine.push_back({t.name, t.global_shape, e.dtype, {file, e.begin, e.end, t.offsets, e.shape, e.crc}});
      }
    }
  } catch (const std::exception& e) {
    write_error = e.what();
  }
  crash_point_at("file_synced", step);
  const std::string mine_json =
      write_error.empty() ? rank_shards_to_json(mine).dump() : nlohmann::json({{"error", write_error}}).dump();
  std::vector<std::string> lists = ckpt_comm_ ? all_gather_strings(*ckpt_comm_, mine_json)
                                              : std::vector<std::string>{mine_json};
  // Rank 0 commits; the others learn whether it did through one all-reduce of its status.
  std::string failure;
  if (rank_ == 0) {
    try {
      commit(step, lists, info);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (ckpt_comm_) {
    at::Tensor status = at::full({1}, failure.empty() ? 0 : 1, at::TensorOptions(at::kInt).device(ckpt_comm_->device()));
    ckpt_comm_->all_reduce(status, comm::ReduceOp::Max)->wait();
    // Every rank has every rank's list: a failed write is named with its reason on every rank, so whichever
    // rank's error the launcher calls the root cause says what went wrong (a full disk, not "could not commit").
    // (MT_CHECK builds its message only when it fails: the lists are parsed again on that path alone.)
    MT_CHECK(status.cpu().item<int>() == 0 || rank_ == 0, "checkpoint step ", step, ": ",
             failed_write_or(lists, "rank 0 could not commit it"));
  }
  MT_CHECK(write_error.empty(), "checkpoint step ", step, ": ", write_error);
  MT_CHECK(failure.empty(), "checkpoint step ", step, ": ", failure);
  const double s = seconds_since(t0);
  const std::string line = log::sprintf("checkpoint %s: %.1f MB from this rank in %.2fs (%.0f MB/s), in the background",
                                         step_dir(step).c_str(), static_cast<double>(bytes) / 1e6, s,
                                         static_cast<double>(bytes) / 1e6 / std::max(s, 1e-9));
  if (own_blocks_only_) log::debug("%s", line.c_str());
  else log::info("%s", line.c_str());
}

void CheckpointManager::commit(int64_t step, const std::vector<std::string>& rank_lists, const SaveInfo& info) {
  std::vector<RankShards> per_rank;
  for (size_t r = 0; r < rank_lists.size(); ++r) {
    const auto j = nlohmann::json::parse(rank_lists[r]);
    if (j.is_object()) throw Error(write_error_line(r, j));  // the whole story: no source location
    per_rank.push_back(rank_shards_from_json(j));
  }
  CheckpointMeta meta;
  meta.step = step;
  meta.world_size = world_;
  auto object = [](const nlohmann::json& j) { return j.is_null() ? nlohmann::json::object() : j; };
  meta.config = object(info.config);
  meta.mesh = object(info.mesh);
  meta.state = object(info.state);
  meta.tensors = merge_shards(per_rank, own_blocks_only_);
  const fs::path final_dir = step_dir(step);
  const fs::path tmp_dir = final_dir.string() + ".tmp";
  write_file_atomic((tmp_dir / "meta.json").string(), to_json(meta).dump(1));
  fsync_path(tmp_dir.string());
  crash_point_at("meta_written", step);
  remove_tree(final_dir.string());  // a re-save of the same step (after a resume) replaces it
  fs::rename(tmp_dir, final_dir);
  fsync_path(dir_);
  crash_point_at("renamed", step);
  write_file_atomic((fs::path(dir_) / "latest").string(), step_dir_name(step) + "\n");
  crash_point_at("committed", step);
  prune();
}

void CheckpointManager::prune() {
  if (keep_ <= 0) return;
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step_", 0) == 0 && n.find(".tmp") == std::string::npos) steps.push_back(e.path());
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_) < steps.size(); ++i) remove_tree(steps[i].string());
}

std::optional<std::string> CheckpointManager::latest() const {
  const std::string name = read_latest(dir_);
  if (!latest_name_problem(name).empty()) return std::nullopt;
  fs::path p = fs::path(dir_) / name;
  if (!fs::exists(p / "meta.json")) return std::nullopt;
  return p.string();
}

Checkpoint CheckpointManager::load(const std::string& path) {
  LoadedCheckpoint info;
  Checkpoint ck;
  ck.tensors = load_full(path, "", &info);
  ck.step = info.meta.step;
  ck.state = info.meta.state;
  ck.config = info.meta.config;
  ck.path = info.path;
  return ck;
}

}  // namespace meshtrain::ckpt
