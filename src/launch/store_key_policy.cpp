// Key protection of the rendezvous store (see store_key_policy.h).
#include "meshtrain/launch/store_key_policy.h"

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

const std::string kLauncherSpace = "meshrun/";

// The key without TCPStore's leading "/" (any number of them: "//meshrun/" is no way around the rule).
std::string unprefixed(const std::string& key) {
  size_t i = 0;
  while (i < key.size() && key[i] == '/') ++i;
  return key.substr(i);
}

}  // namespace

std::string store_key_refusal(PeerRole role, int node, const std::string& key, bool write) {
  const std::string k = unprefixed(key);
  const bool launcher_key = k.rfind(kLauncherSpace, 0) == 0;
  if (role == PeerRole::Workers) {
    if (launcher_key) return cat("a worker connection of node ", node, " may not touch the launchers' key '", key, "'");
    return "";
  }
  if (!launcher_key)
    return cat("the launcher connection of node ", node, " may only touch keys under meshrun/, not '", key, "'");
  if (write && k == kLauncherSpace + "epoch" && node != 0)
    return cat("the launcher connection of node ", node, " may not write the store's '", key, "' (node 0's)");
  const std::string nproc = kLauncherSpace + "nproc/";
  if (write && k.rfind(nproc, 0) == 0 && k != nproc + std::to_string(node))
    return cat("the launcher connection of node ", node, " may not write another node's '", key, "'");
  // meshrun/end/<round>/<n> and meshrun/join/<round>/<n>: the node's own "finished" / "joined the round" marker
  // (the counters themselves have no second '/').
  const size_t slash = k.rfind('/');
  for (const std::string& marker : {kLauncherSpace + "end/", kLauncherSpace + "join/"})
    if (write && k.rfind(marker, 0) == 0 && slash > marker.size() && k.substr(slash + 1) != std::to_string(node))
      return cat("the launcher connection of node ", node, " may not write another node's '", key, "'");
  return "";
}

}  // namespace meshtrain::launch
