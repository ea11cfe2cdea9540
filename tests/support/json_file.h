// read_json_file(): a JSON file the code under test wrote (a checkpoint's meta.json), parsed for the test to
// inspect or damage. Header-only; tests/ is on every test binary's include path.
#pragma once

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace meshtrain::testing_support {

inline nlohmann::json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

}  // namespace meshtrain::testing_support
