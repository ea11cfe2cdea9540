#include "meshtrain/core/fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

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

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SYS_CHECK(fd, "open ", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  SYS_CHECK(rc, "fsync ", path);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MT_CHECK(out, "cannot write ", tmp);
    out << text;
    out.flush();
    MT_CHECK(out, "write failed: ", tmp);
  }
  fsync_path(tmp);
  std::filesystem::rename(tmp, path);
  const auto parent = std::filesystem::path(path).parent_path();
  fsync_path(parent.empty() ? std::string(".") : parent.string());
}

}  // namespace meshtrain
