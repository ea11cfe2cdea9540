// Helpers shared by the unit tests of every room (header-only; tests/ is on each test binary's include path).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"

namespace meshtrain::testing_support {

// A fresh, empty directory under the system temp dir, unique per test name and process.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("meshtrain_test_" + name + "_" + std::to_string(::getpid()));
  remove_tree(d.string());
  std::filesystem::create_directories(d);
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
