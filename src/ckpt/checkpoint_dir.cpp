// CheckpointDir; see checkpoint_dir.h.
#include "meshtrain/ckpt/checkpoint_dir.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

int64_t step_of_dir_name(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string read_latest(const std::string& ckpt_dir) {
  std::ifstream in(fs::path(ckpt_dir) / "latest");
  std::string name;
  in >> name;
  return name;
}

std::string latest_name_problem(const std::string& name) {
  if (name.empty()) return "empty (no complete checkpoint)";
  if (step_of_dir_name(name) >= 0) return "";
  return cat("names '", name, "', which is not a complete step directory beside it (valid: a name step_N, never a "
             "path: a checkpoint's latest does not lead outside its directory)");
}

std::string resolve_checkpoint_dir(const std::string& path_in) {
  fs::path path = path_in;
  if (fs::exists(path / "latest") && !fs::exists(path / "meta.json")) {
    const std::string name = read_latest(path.string());
    const std::string problem = latest_name_problem(name);
    MT_USER_CHECK(problem.empty(), (path / "latest").string(), ": ", problem);
    path /= name;
  }
  std::string p = path.lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  MT_USER_CHECK(!(p.size() >= 4 && p.compare(p.size() - 4, 4, ".tmp") == 0), p,
                ": an incomplete checkpoint (.tmp) is never loaded");
  return p;
}

}  // namespace meshtrain::ckpt
