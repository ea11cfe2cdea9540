#include "meshtrain/launch/scratch_dir.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/worker_env.h"

namespace meshtrain::launch {
namespace {

constexpr const char* kOwnerFile = "/.owner";

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot): with the pid it names a process
// uniquely, so a pid reused by a later process does not keep a dead launcher's directory alive.
std::string start_time_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
  }
  return field;
}

bool owner_alive(const std::string& dir) {
  std::ifstream in(dir + kOwnerFile);
  pid_t pid = 0;
  std::string started;
  if (!(in >> pid >> started) || pid <= 0) return true;  // unreadable: not ours to judge
  return start_time_of(pid) == started;
}

bool owned_by_me(const std::string& dir) {
  struct stat st{};
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid();
}

bool is_prefix_dir(const std::string& path, const std::string& file) {
  return file.size() > path.size() && file.compare(0, path.size(), path) == 0 && file[path.size()] == '/';
}

// Removes every entry under `dir` that is not, and does not lead to, a kept file.
void prune_dir(const std::string& dir, const std::vector<std::string>& kept) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::string n = e->d_name; n != "." && n != "..") names.push_back(dir + "/" + n);
  ::closedir(d);
  for (const std::string& p : names) {
    bool keep = false, leads = false;
    for (const std::string& k : kept) {
      keep = keep || k == p;
      leads = leads || is_prefix_dir(p, k);
    }
    if (keep) continue;
    if (leads) prune_dir(p, kept);
    else remove_tree(p);
  }
}

}  // namespace

std::string scratch_parent() {
  // A TMPDIR that is not a writable directory would fail every launch; /tmp is what mkdtemp(3) users expect.
  const char* t = std::getenv("TMPDIR");
  return t && *t && ::access(t, W_OK | X_OK) == 0 ? std::string(t) : std::string("/tmp");
}

std::string host_memory_parent() {
  for (const char* dir : {static_cast<const char*>(std::getenv(kHostMemoryParentEnv)), "/dev/shm"})
    if (dir && *dir && ::access(dir, W_OK | X_OK) == 0) return dir;
  return scratch_parent();
}

int sweep_stale_scratch(const std::string& parent) {
  DIR* d = ::opendir(parent.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string dir = parent + "/" + name;
    if (name.rfind("meshrun-", 0) != 0 || !owned_by_me(dir) || ::access((dir + kOwnerFile).c_str(), F_OK) != 0)
      continue;
    if (!owner_alive(dir)) stale.push_back(dir);
  }
  ::closedir(d);
  int removed = 0;
  for (const std::string& dir : stale) {
    try {
      remove_tree(dir);
      ++removed;
    } catch (const std::exception& e) {
      log::debug("meshrun: stale scratch %s not removed: %s", dir.c_str(), e.what());
    }
  }
  return removed;
}

ScratchDir::ScratchDir(const std::string& parent) {
  const std::string base = parent.empty() ? scratch_parent() : parent;
  if (int n = sweep_stale_scratch(base); n > 0)
    log::info("meshrun: removed %d scratch director%s left in %s by launchers that were killed", n,
              n == 1 ? "y" : "ies", base.c_str());
  std::string tmpl = base + "/meshrun-XXXXXX";
  MT_CHECK(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp ", tmpl, " failed");
  path_ = tmpl;
  std::ofstream owner(path_ + kOwnerFile);
  owner << ::getpid() << " " << start_time_of(::getpid()) << "\n";
}

ScratchDir::~ScratchDir() {
  try {
    if (keep_all_ || !kept_.empty()) {
      prune();
      ::unlink((path_ + kOwnerFile).c_str());  // what is left is the user's now: never swept
    } else {
      remove_tree(path_);  // core/fs.h: std::filesystem::remove_all is unsafe next to libtorch
    }
  } catch (const std::exception& e) {
    log::warn("meshrun: %s", e.what());
  }
}

void ScratchDir::keep_all() { keep_all_ = true; }

void ScratchDir::keep(const std::string& file) {
  if (is_prefix_dir(path_, file)) kept_.push_back(file);
}

void ScratchDir::prune() const {
  if (!keep_all_) prune_dir(path_, kept_);
}

}  // namespace meshtrain::launch
