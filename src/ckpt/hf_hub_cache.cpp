// The Hub cache resolved offline (hf_hub_cache.h).
#include "meshtrain/ckpt/hf_hub_cache.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_id_part(const std::string& p) {
  if (p.empty() || p[0] == '.' || p.size() > 96) return false;
  for (unsigned char c : p)
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

// <cache>/models--org--name: the cache's folder for a model id.
fs::path repo_dir(const std::string& id) {
  const size_t slash = id.find('/');
  return fs::path(hf_hub_cache_dir()) / ("models--" + id.substr(0, slash) + "--" + id.substr(slash + 1));
}

// The first word of refs/main: the commit hash its snapshot directory is named after.
std::string main_revision(const fs::path& repo) {
  std::ifstream in(repo / "refs" / "main");
  std::string rev;
  in >> rev;
  return rev.find('/') == std::string::npos && rev != "." && rev != ".." ? rev : std::string();
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (const std::string c = env_or_empty("HF_HUB_CACHE"); !c.empty()) return c;
  if (const std::string h = env_or_empty("HF_HOME"); !h.empty()) return (fs::path(h) / "hub").string();
  if (const std::string x = env_or_empty("XDG_CACHE_HOME"); !x.empty())
    return (fs::path(x) / "huggingface" / "hub").string();
  return (fs::path(env_or_empty("HOME")) / ".cache" / "huggingface" / "hub").string();
}

bool is_hub_model_id(const std::string& s) {
  const size_t slash = s.find('/');
  return slash != std::string::npos && s.find('/', slash + 1) == std::string::npos &&
         is_id_part(s.substr(0, slash)) && is_id_part(s.substr(slash + 1));
}

std::string find_hub_snapshot(const std::string& id) {
  if (!is_hub_model_id(id)) return "";
  const fs::path repo = repo_dir(id);
  const std::string rev = main_revision(repo);
  if (rev.empty() || !fs::is_directory(repo / "snapshots" / rev)) return "";
  return (repo / "snapshots" / rev).string();
}

std::string hub_snapshot(const std::string& id, const std::string& what) {
  const std::string found = find_hub_snapshot(id);
  if (!found.empty()) return found;
  const fs::path repo = repo_dir(id);
  const std::string rev = main_revision(repo);
  const std::string looked = rev.empty() ? (repo / "refs" / "main").string() : (repo / "snapshots" / rev).string();
  throw UserError(cat(what.empty() ? "" : what + " ", id, ": no such directory, and the Hugging Face cache holds no "
                      "model of that id (looked for ", looked, "; HF_HUB_CACHE or HF_HOME name another cache; "
                      "nothing is downloaded)"));
}

}  // namespace meshtrain::ckpt
