#include "meshtrain/launch/slurm_env.h"

#include <cstdlib>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

std::vector<std::string> split_top_level(const std::string& s, const std::string& whole) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    MT_USER_CHECK(depth >= 0 && depth <= 1, "meshrun: bad Slurm hostlist '", whole, "': unbalanced brackets");
    if (c == ',' && depth == 0) {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  MT_USER_CHECK(depth == 0, "meshrun: bad Slurm hostlist '", whole, "': unbalanced brackets");
  if (!cur.empty()) parts.push_back(cur);
  return parts;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

void expand_term(const std::string& term, const std::string& whole, std::vector<std::string>& out) {
  auto open = term.find('[');
  if (open == std::string::npos) {
    out.push_back(term);
    return;
  }
  auto close = term.find(']', open);
  const std::string prefix = term.substr(0, open);
  const std::string body = term.substr(open + 1, close - open - 1);
  MT_USER_CHECK(!body.empty(), "meshrun: bad Slurm hostlist '", whole, "': empty brackets");
  std::vector<std::string> suffixes;
  expand_term(term.substr(close + 1), whole, suffixes);
  for (const std::string& range : split_top_level(body, whole)) {
    auto dash = range.find('-');
    std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    MT_USER_CHECK(all_digits(lo) && all_digits(hi), "meshrun: bad Slurm hostlist '", whole, "': range '", range,
                  "' is not N or N-M");
    long a = std::strtol(lo.c_str(), nullptr, 10), b = std::strtol(hi.c_str(), nullptr, 10);
    MT_USER_CHECK(a <= b && b - a < 100000, "meshrun: bad Slurm hostlist '", whole, "': range '", range, "'");
    for (long i = a; i <= b; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
      for (const std::string& s : suffixes) out.push_back(prefix + n + s);
    }
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& expr) {
  std::vector<std::string> out;
  for (const std::string& term : split_top_level(expr, expr)) expand_term(term, expr, out);
  return out;
}

std::string apply_slurm_env(LaunchOptions& o, const EnvLookup& env) {
  auto job = env("SLURM_JOB_ID");
  auto node_id = env("SLURM_NODEID");
  if (!job || !node_id || o.standalone) return "";  // --standalone means this node alone, Slurm or not
  auto set = [&](const char* flag) { return o.explicitly_set.count(flag) > 0; };
  // Inside `srun` the step's node count is what matters; in the batch script it is the allocation's.
  auto nn = env("SLURM_STEP_NUM_NODES");
  if (!nn) nn = env("SLURM_NNODES");
  auto nodelist = env("SLURM_STEP_NODELIST");
  if (!nodelist) nodelist = env("SLURM_JOB_NODELIST");
  if (!set("nnodes") && nn) o.nnodes = *nn;
  if (!set("node-rank")) o.node_rank = std::atoi(node_id->c_str());
  if (!set("master-addr") && nodelist) {
    auto hosts = expand_hostlist(*nodelist);
    if (!hosts.empty()) o.master_addr = hosts.front();
  }
  if (!set("run-id")) o.run_id = *job;
  if (!set("nproc-per-node")) {
    if (auto g = env("SLURM_GPUS_ON_NODE"); g && std::atoi(g->c_str()) > 0) o.nproc_per_node = *g;
  }
  return cat("Slurm job ", *job, ": node ", o.node_rank, " of ", o.nnodes, ", master ", o.master_addr, ":",
             o.master_port);
}

}  // namespace meshtrain::launch
