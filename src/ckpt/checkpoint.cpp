#include "meshtrain/ckpt/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

std::string step_name(int64_t step) { return log::sprintf("step_%08lld", static_cast<long long>(step)); }

void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  SYS_CHECK(fd, "open ", p.string());
  int rc = ::fsync(fd);
  ::close(fd);
  SYS_CHECK(rc, "fsync ", p.string());
}

// Writes `text` to `path` through path.tmp + fsync + rename, so readers see the old or the new content.
void write_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MT_CHECK(out, "cannot write ", tmp.string());
    out << text;
    out.flush();
    MT_CHECK(out, "write failed: ", tmp.string());
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

}  // namespace

CheckpointManager::CheckpointManager(std::string dir, int64_t keep, comm::CommPtr comm)
    : dir_(std::move(dir)), keep_(keep), comm_(std::move(comm)) {
  const int rank = comm_ ? comm_->rank() : 0;
  if (rank == 0) {
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) {
        log::warn("removing incomplete checkpoint %s (a save was interrupted)", e.path().c_str());
        remove_tree(e.path().string());
      }
    }
  }
  if (comm_) comm_->barrier();
}

std::string CheckpointManager::save(int64_t step, const std::map<std::string, at::Tensor>& tensors,
                                    const nlohmann::json& state) {
  const int rank = comm_ ? comm_->rank() : 0;
  const fs::path final_dir = fs::path(dir_) / step_name(step);
  const fs::path tmp_dir = final_dir.string() + ".tmp";
  nlohmann::json meta;
  if (rank == 0) {
    remove_tree(tmp_dir.string());
    fs::create_directories(tmp_dir);
    const std::string file = "rank_00000.safetensors";
    auto entries = write_safetensors((tmp_dir / file).string(), tensors, {{"format", "pt"}});
    meta["format_version"] = kFormatVersion;
    meta["step"] = step;
    meta["world_size"] = comm_ ? comm_->size() : 1;
    meta["layout"] = "replicated";
    meta["state"] = state;
    auto& tj = meta["tensors"];
    for (const auto& [name, e] : entries)
      tj[name] = {{"shape", e.shape}, {"dtype", e.dtype},
                  {"shards", {{{"file", file}, {"offsets", std::vector<int64_t>(e.shape.size(), 0)},
                               {"shape", e.shape}, {"byte_range", {e.begin, e.end}}, {"crc32", e.crc}}}}};
  }
  // Every rank's files are on disk before the directory becomes visible under its final name.
  if (comm_) comm_->barrier();
  if (rank == 0) {
    write_atomic(tmp_dir / "meta.json", meta.dump(1));
    fsync_path(tmp_dir);
    remove_tree(final_dir.string());  // a re-save of the same step (after a resume) replaces it
    fs::rename(tmp_dir, final_dir);
    fsync_path(dir_);
    write_atomic(fs::path(dir_) / "latest", step_name(step) + "\n");
    prune();
  }
  if (comm_) comm_->barrier();
  return final_dir.string();
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
  std::ifstream in(fs::path(dir_) / "latest");
  std::string name;
  if (!(in >> name)) return std::nullopt;
  fs::path p = fs::path(dir_) / name;
  if (!fs::exists(p / "meta.json")) return std::nullopt;
  return p.string();
}

Checkpoint CheckpointManager::load(const std::string& path_in) {
  fs::path path = path_in;
  if (fs::exists(path / "latest") && !fs::exists(path / "meta.json")) {
    std::ifstream in(path / "latest");
    std::string name;
    in >> name;
    path /= name;
  }
  MT_USER_CHECK(path.string().find(".tmp") == std::string::npos, path.string(),
                ": an incomplete checkpoint (.tmp) is never loaded");
  const fs::path meta_path = path / "meta.json";
  std::ifstream in(meta_path);
  MT_USER_CHECK(in, meta_path.string(), ": no such checkpoint metadata (not a checkpoint directory?)");
  nlohmann::json meta;
  try {
    in >> meta;
  } catch (const std::exception& e) {
    throw UserError(cat(meta_path.string(), ": corrupt checkpoint metadata: ", e.what()));
  }
  const int version = meta.value("format_version", 0);
  MT_USER_CHECK(version == kFormatVersion, meta_path.string(), ": format_version ", version,
                " is not supported (valid: ", kFormatVersion, ")");
  Checkpoint ck;
  ck.step = meta.at("step").get<int64_t>();
  ck.state = meta.value("state", nlohmann::json::object());
  ck.path = path.string();
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  for (auto& [name, tj] : meta.at("tensors").items()) {
    const auto& shard = tj.at("shards").at(0);
    const std::string file = shard.at("file").get<std::string>();
    auto& reader = readers[file];
    if (!reader) reader = std::make_unique<SafetensorsReader>((path / file).string());
    at::Tensor t = reader->read(name);
    const uint32_t want = shard.at("crc32").get<uint32_t>();
    const uint32_t got = crc32(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
    MT_USER_CHECK(got == want, (path / file).string(), ": tensor '", name, "' fails its checksum (crc32 ", got,
                  ", expected ", want, "): the checkpoint is corrupt");
    ck.tensors[name] = t;
  }
  return ck;
}

}  // namespace meshtrain::ckpt
