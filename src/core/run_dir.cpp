#include "meshtrain/core/run_dir.h"

#include <algorithm>
#include <cstddef>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/core/join.h"

namespace fs = std::filesystem;

namespace meshtrain {
namespace {

// step_00000400, step_00000400.tmp, latest: what a checkpoint directory holds (ckpt/checkpoint_dir.h names them).
bool is_checkpoint_entry(const std::string& name) { return name == "latest" || name.rfind("step_", 0) == 0; }

}  // namespace

std::vector<std::string> previous_run_files(const Config& cfg) {
  std::vector<std::string> found;
  std::error_code ec;
  if (fs::is_directory(cfg.checkpoint.dir, ec))
    for (const auto& e : fs::directory_iterator(cfg.checkpoint.dir, ec))
      if (is_checkpoint_entry(e.path().filename().string())) found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  if (fs::is_regular_file(cfg.logging.metrics, ec) && fs::file_size(cfg.logging.metrics, ec) > 0 && !ec)
    found.push_back(cfg.logging.metrics);
  return found;
}

void check_fresh_start(const Config& cfg) {
  if (cfg.checkpoint.resume != "none" || cfg.train.overwrite) return;
  const std::vector<std::string> found = previous_run_files(cfg);
  if (found.empty()) return;
  // The newest few are enough to recognise the run; a long list would hide the choices at the end of the line.
  std::vector<std::string> shown(found.end() - static_cast<std::ptrdiff_t>(std::min<size_t>(found.size(), 3)),
                                 found.end());
  const std::string where = cfg.source.empty() ? "" : cfg.source + ": ";
  throw UserError(cat(where, "train.out_dir ", cfg.train.out_dir, " holds a previous run (", join(shown, ", "),
                      found.size() > shown.size() ? cat(" and ", found.size() - shown.size(), " more") : "",
                      ") and checkpoint.resume is none: continue it with --set "
                      "checkpoint.resume=auto, or start afresh in another train.out_dir or with --overwrite "
                      "(which removes them first)"));
}

}  // namespace meshtrain
