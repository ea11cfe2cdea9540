#include "meshtrain/ckpt/resume_candidates.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/core/error.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

// Why `latest` misleads ("" when it names the newest usable checkpoint, or is absent from an empty directory).
std::string latest_problem(const fs::path& latest, const std::vector<std::string>& usable, bool any_steps) {
  if (!fs::exists(latest)) return any_steps ? "missing" : "";
  const std::string name = read_latest(latest.parent_path().string());
  if (std::string why = latest_name_problem(name); !why.empty()) return why;
  if (!usable.empty() && name == fs::path(usable.front()).filename().string()) return "";
  if (!fs::exists(latest.parent_path() / name)) return cat("names ", name, ", which does not exist");
  return cat("names ", name, ", which is not the newest usable checkpoint");
}

}  // namespace

std::string ResumeCandidates::describe_skipped() const {
  std::string out;
  for (const auto& s : skipped) out += cat(out.empty() ? "" : "; ", s.dir, ": ", s.why);
  return out;
}

std::string verify_checkpoint(const std::string& step_dir) {
  CheckpointMeta meta;
  try {
    meta = read_meta(step_dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  std::map<std::string, uint64_t> reach;  // file → the end of the furthest byte range meta.json gives in it
  for (const auto& [name, t] : meta.tensors)
    for (const auto& s : t.shards) reach[s.file] = std::max(reach[s.file], s.end);
  for (const auto& [file, end] : reach) {
    const fs::path p = fs::path(step_dir) / file;
    std::error_code ec;
    const uintmax_t size = fs::file_size(p, ec);
    if (ec) return cat(p.string(), ": missing (meta.json names it)");
    if (size < end) return cat(p.string(), ": ", size, " bytes, but meta.json's byte ranges reach byte ", end, " (truncated)");
  }
  return "";
}

ResumeCandidates find_resume_candidates(const std::string& ckpt_dir) {
  ResumeCandidates out;
  std::error_code ec;
  if (!fs::is_directory(ckpt_dir, ec)) return out;
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const auto& e : fs::directory_iterator(ckpt_dir)) {
    const int64_t step = step_of_dir_name(e.path().filename().string());
    if (step >= 0 && e.is_directory()) steps.emplace_back(step, e.path().string());
  }
  std::sort(steps.rbegin(), steps.rend());
  for (const auto& [step, dir] : steps) {
    std::string why = verify_checkpoint(dir);
    if (why.empty()) out.usable.push_back(dir);
    else out.skipped.push_back({dir, std::move(why)});
  }
  const fs::path latest = fs::path(ckpt_dir) / "latest";
  out.holds_checkpoints = !steps.empty() || fs::exists(latest);
  if (std::string why = latest_problem(latest, out.usable, !steps.empty()); !why.empty())
    out.skipped.push_back({latest.string(), std::move(why)});
  return out;
}

}  // namespace meshtrain::ckpt
