#include "meshtrain/core/fs.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain {

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return;
  static thread_local std::string failed;
  failed.clear();
  // Depth-first (FTW_DEPTH) so directories are empty when removed; FTW_PHYS: never follow symlinks.
  int rc = ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        if (::remove(p) == 0) return 0;
        failed = std::string(p) + ": " + std::strerror(errno);
        return 1;
      },
      32, FTW_DEPTH | FTW_PHYS);
  MT_CHECK(rc == 0, "cannot remove ", failed.empty() ? path + ": " + std::strerror(errno) : failed);
}

}  // namespace meshtrain
