// Helpers shared by the unit tests of every room (header-only; tests/ is on each test binary's include path).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"

namespace meshtrain::testing_support {

// The directories temp_dir made in this process, removed when it exits normally — by the process that made
// them only (tests fork ranks whose exit must not delete their parent's files). MESHTRAIN_KEEP_TEST_DIRS=1
// keeps them for a post-mortem.
class TempDirRegistry {
 public:
  void add(const std::filesystem::path& d) { dirs_.push_back(d); }
  ~TempDirRegistry() {
    if (::getpid() != owner_ || std::getenv("MESHTRAIN_KEEP_TEST_DIRS") != nullptr) return;
    for (const auto& d : dirs_) {
      try {
        remove_tree(d.string());
      } catch (...) {
      }
    }
  }

 private:
  pid_t owner_ = ::getpid();
  std::vector<std::filesystem::path> dirs_;
};

// A fresh, empty directory under the system temp dir, unique per test name and process; removed at exit.
inline std::filesystem::path temp_dir(const std::string& name) {
  static TempDirRegistry registry;
  auto d = std::filesystem::temp_directory_path() / ("meshtrain_test_" + name + "_" + std::to_string(::getpid()));
  remove_tree(d.string());
  std::filesystem::create_directories(d);
  registry.add(d);
  return d;
}

// The message of the UserError `fn` throws, or a marker that makes every fragment check fail.
inline std::string user_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no UserError thrown>";
}

}  // namespace meshtrain::testing_support
