#include "meshtrain/launch/torchrun_compat.h"

#include <cstdlib>
#include <sstream>
#include <utility>

#include "meshtrain/core/error.h"
#include "meshtrain/core/trim.h"

namespace meshtrain::launch {
namespace {

// torchrun's _parse_rendezvous_config: "k=v,k=v", keys and values non-empty, whitespace trimmed.
std::vector<std::pair<std::string, std::string>> parse_rdzv_conf(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> kv;
  if (trim_blanks(text).empty()) return kv;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto eq = item.find('=');
    const std::string k = trim_blanks(item.substr(0, eq));
    const std::string v = eq == std::string::npos ? "" : trim_blanks(item.substr(eq + 1));
    MT_USER_CHECK(!k.empty() && !v.empty(), "meshrun: --rdzv-conf '", text,
                  "': each entry must be KEY=VALUE, comma-separated (e.g. join_timeout=900)");
    kv.emplace_back(k, v);
  }
  return kv;
}

bool is_timeout_key(const std::string& k) { return k == "timeout" || k == "join_timeout"; }
bool is_known_key(const std::string& k) { return is_timeout_key(k) || k == "token_file"; }

}  // namespace

void apply_rdzv_conf(LaunchOptions& o) {
  for (const auto& [k, v] : parse_rdzv_conf(o.rdzv_conf)) {
    if (k == "token_file") o.rdzv_token_file = v;
    if (!is_timeout_key(k) || o.explicitly_set.count("rdzv-timeout")) continue;
    char* end = nullptr;
    const double t = std::strtod(v.c_str(), &end);
    MT_USER_CHECK(end && *end == '\0' && t > 0, "meshrun: --rdzv-conf ", k, "=", v,
                  " is not a positive number of seconds");
    o.rdzv_timeout = t;
  }
}

std::vector<std::string> torchrun_compat_notes(const LaunchOptions& o) {
  std::vector<std::string> notes;
  std::string ignored;
  for (const auto& [k, v] : parse_rdzv_conf(o.rdzv_conf))
    if (!is_known_key(k)) ignored += (ignored.empty() ? "" : ", ") + k;
  if (!ignored.empty())
    notes.push_back(cat("meshrun: --rdzv-conf ", ignored, " ignored: meshrun's rendezvous is a static store on "
                        "node 0 with fixed membership; only timeout/join_timeout (as --rdzv-timeout) and token_file "
                        "apply"));
  if (o.start_method != "spawn")
    notes.push_back(cat("meshrun: --start-method ", o.start_method, " ignored: workers are always fresh "
                        "processes (fork + exec, like spawn); there is no Python parent to fork from"));
  if (!o.logs_specs.empty())
    notes.push_back(cat("meshrun: --logs-specs ", o.logs_specs, " ignored: it names a Python LogsSpecs class; "
                        "meshrun's logs follow --log-dir/--redirects/--tee"));
  if (o.run_path && (o.no_python || o.module))
    notes.push_back("meshrun: --run-path wins over --no-python/--module (as in torchrun): PROGRAM runs as a "
                    "Python script");
  return notes;
}

}  // namespace meshtrain::launch
