#include "meshtrain/core/glob.h"

#include <glob.h>

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain {

std::vector<std::string> expand_glob(const std::string& pattern, const std::string& what) {
  glob_t g{};
  // GLOB_BRACE: alternatives as a shell expands them ("data/{a,b}_train.bin").
  int rc = ::glob(pattern.c_str(), GLOB_NOSORT | GLOB_BRACE, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  MT_USER_CHECK(!files.empty(), what, ": '", pattern, "' matches no file");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace meshtrain
